// What an agent id may be, checked alike where it is configured (node_name, $NODE_NAME) and
// where the broker receives it: 1 to 256 bytes of printable ASCII without spaces or '|' (the
// broker's journal keys and NATS subjects are built from it). An id the broker would refuse
// is refused at start, not discovered as lost events.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mcp {

// Why `id` cannot be an agent id, or nullopt when it can.
inline std::optional<std::string> agent_id_problem(std::string_view id) {
  if (id.empty()) return "agent id missing";
  if (id.size() > 256) return "agent id longer than 256 bytes";
  for (const char c : id)
    if (c <= ' ' || c > '~' || c == '|') return "agent id must be printable ASCII without spaces or '|'";
  return std::nullopt;
}

}  // namespace mcp
