#include "common/trace_id_prefix.h"

namespace mcp {

int hex_digit_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool TraceIdPrefix::matches(uint64_t hi, uint64_t lo) const {
  const uint32_t n = bits();
  const auto leading = [](uint64_t word, uint32_t k) { return k == 0 ? 0 : word >> (64 - k); };
  uint64_t want_hi = 0, want_lo = 0;
  for (int i = 0; i < 8; i++) want_hi = want_hi << 8 | bytes[i];
  for (int i = 8; i < 16; i++) want_lo = want_lo << 8 | bytes[i];
  if (n <= 64) return leading(hi, n) == leading(want_hi, n);
  return hi == want_hi && leading(lo, n - 64) == leading(want_lo, n - 64);
}

std::string trace_id_prefix_error(std::string_view text) {
  if (text.empty() || text.size() > 32) return "a trace-id prefix is 1 to 32 hex digits";
  for (char c : text)
    if (hex_digit_value(static_cast<unsigned char>(c)) < 0) return "a trace-id prefix is 1 to 32 hex digits, not '" + std::string(text) + "'";
  return {};
}

std::optional<TraceIdPrefix> parse_trace_id_prefix(std::string_view text) {
  if (!trace_id_prefix_error(text).empty()) return std::nullopt;
  TraceIdPrefix p;
  for (size_t i = 0; i < text.size(); i++) {
    const int v = hex_digit_value(static_cast<unsigned char>(text[i]));
    p.digits += "0123456789abcdef"[v];
    p.bytes[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? v << 4 : v);
  }
  return p;
}

}  // namespace mcp
