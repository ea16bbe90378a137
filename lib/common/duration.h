// Parses human durations ("10s", "250ms", "2m", "1h", "500us", "100ns"); a bare
// number is seconds. Throws mcp::Error (usage) naming the bad text.
#pragma once
#include <chrono>
#include <string_view>

namespace mcp {
std::chrono::nanoseconds parse_duration(std::string_view text);
// parse_duration, refusing more than `max` (usage error naming both).
std::chrono::nanoseconds parse_duration_up_to(std::string_view text, std::chrono::nanoseconds max);
}
