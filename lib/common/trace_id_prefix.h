// A trace-id prefix rule's prefix: the leading 1..32 hex digits of the W3C trace id (as its
// 32 lowercase characters are written), one spelling for the broker's policies, the CRD's
// traceIdPrefix, `policy apply --trace-id-prefix` and `trace --trace-id-prefix`.
//
// Contract:
// - parse_trace_id_prefix accepts 1..32 hex digits of either case and returns them lowercase
//   with the id's bits they fix; anything else is nullopt (trace_id_prefix_error says why in
//   one line, naming no flag).
// - matches(hi, lo): the id whose bytes 0..7 are `hi` and 8..15 `lo` (big-endian halves, as
//   the kernel records them) starts with these digits: the kernel's LPM trie answers the same
//   question for the decision (bpf/mcp_abi.h, struct mcp_prefix_key).
// - A prefix longer than 18 digits fixes bits of OpenTelemetry's randomness (the id's last 14
//   digits): the decision inside it stays R >= T, but R is no longer uniform there.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mcp_abi.h"

namespace mcp {

// The prefix rules an agent holds at once (its kernel table's slots, bpf/mcp_abi.h). The broker
// refuses more for one (service, probe): the agent could never apply them all.
inline constexpr size_t kMaxTraceIdPrefixRules = MCP_MAX_TRACE_PREFIXES - 1;

struct TraceIdPrefix {
  std::string digits;               // lowercase, 1..32
  std::array<uint8_t, 16> bytes{};  // the id's leading bytes, digits past the prefix zero
  uint32_t bits() const { return static_cast<uint32_t>(digits.size() * 4); }
  bool matches(uint64_t hi, uint64_t lo) const;
  auto operator<=>(const TraceIdPrefix& o) const { return digits <=> o.digits; }
  bool operator==(const TraceIdPrefix& o) const { return digits == o.digits; }
};

std::optional<TraceIdPrefix> parse_trace_id_prefix(std::string_view text);
// A hex digit's value (either case), -1 for any other character: one reading of trace ids.
int hex_digit_value(unsigned char c);
std::string trace_id_prefix_error(std::string_view text);  // empty: valid

}  // namespace mcp
