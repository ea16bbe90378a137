// The initial metadata a broker's Subscribe stream opens with (embedded backend): the id of the
// journal its offsets count in, and the offset its live packets start at, both decimal. A
// subscriber that has received nothing yet resumes from there after a reconnect, so events
// stored during its backoff still reach it (issue 29).
#pragma once
#include <string_view>

namespace mcp {

inline constexpr std::string_view kJournalHeader = "x-mcp-journal";
inline constexpr std::string_view kJournalNextHeader = "x-mcp-journal-next";

}  // namespace mcp
