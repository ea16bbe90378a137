#include "common/duration.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/error.h"

namespace mcp {

std::chrono::nanoseconds parse_duration(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data() || value < 0)
    throw usage_error("bad duration '" + std::string(text) + "' (expected e.g. 10s, 250ms, 2m)");
  const std::string_view unit(ptr, end - ptr);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1e9;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ns") scale = 1;
  else if (unit == "m") scale = 60e9;
  else if (unit == "h") scale = 3600e9;
  else if (unit == "d") scale = 86400e9;
  else throw usage_error("bad duration unit in '" + std::string(text) + "' (use ns, us, ms, s, m, h, d)");
  const double ns = value * scale;
  if (!std::isfinite(ns) || ns >= 9.2e18)
    throw usage_error("duration '" + std::string(text) + "' is out of range");
  return std::chrono::nanoseconds(static_cast<int64_t>(ns));
}

std::chrono::nanoseconds parse_duration_up_to(std::string_view text, std::chrono::nanoseconds max) {
  const auto d = parse_duration(text);
  if (d > max) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%gs", std::chrono::duration<double>(max).count());
    throw usage_error("duration '" + std::string(text) + "' is above the limit of " + limit);
  }
  return d;
}

}  // namespace mcp
