#include "control/trace_id_arg.h"

#include <charconv>

#include "common/error.h"
#include "common/setting_names.h"
#include "common/trace_id_prefix.h"
#include "sample_math.h"

namespace mcp::control {

namespace {
constexpr std::size_t kHexChars = 32;
constexpr std::size_t kRawBytes = 16;
constexpr std::size_t kRandomBytes = 7;
}  // namespace

std::string_view to_string(TraceIdFormat format) {
  return format == TraceIdFormat::kHex32 ? "hex32" : format == TraceIdFormat::kBytes16 ? "bytes16" : "u64";
}

std::string trace_id_arg_error(std::string_view text, TraceIdArg& out) {
  const auto colon = text.find(':');
  const std::string_view index = text.substr(0, colon);
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
  if (index.empty() || ec != std::errc() || ptr != index.data() + index.size())
    return "expected N:hex32, N:bytes16 or N:u64 with N an argument index 0..5";
  if (value > 5) return "argument index must be 0..5";
  if (colon == std::string_view::npos)
    return "say what argument " + std::string(index) + " holds: " + std::string(index) + ":hex32 (pointer to 32 hex "
           "characters), " + std::string(index) + ":bytes16 (pointer to 16 bytes) or " + std::string(index) +
           ":u64 (the id itself)";
  const std::string_view format = text.substr(colon + 1);
  if (format == "hex32") out.format = TraceIdFormat::kHex32;
  else if (format == "bytes16") out.format = TraceIdFormat::kBytes16;
  else if (format == "u64") out.format = TraceIdFormat::kU64;
  else return "format must be hex32, bytes16 or u64";
  out.arg_index = static_cast<uint8_t>(value);
  return {};
}

TraceIdArg parse_trace_id_arg(std::string_view text) {
  TraceIdArg out;
  if (auto why = trace_id_arg_error(text, out); !why.empty())
    throw usage_error(setting_name(Setting::kTraceIdArg) + " '" + std::string(text) + "': " + why);
  return out;
}

std::optional<uint64_t> trace_randomness56(std::span<const uint8_t> raw, TraceIdFormat format) {
  uint64_t r = 0;
  if (format == TraceIdFormat::kBytes16) {
    if (raw.size() < kRawBytes) return std::nullopt;
    for (std::size_t i = kRawBytes - kRandomBytes; i < kRawBytes; ++i) r = r << 8 | raw[i];
    return r;
  }
  if (raw.size() < kHexChars) return std::nullopt;
  // Every character must be hex, as the kernel reads (and records) the whole id.
  for (std::size_t i = 0; i < kHexChars; ++i) {
    const int v = hex_digit_value(raw[i]);
    if (v < 0) return std::nullopt;
    r = r << 4 | static_cast<uint64_t>(v);
  }
  return r & kRandomness56Mask;
}

std::optional<uint64_t> trace_randomness56_hex(std::string_view hex32) {
  return trace_randomness56(
      std::span(reinterpret_cast<const uint8_t*>(hex32.data()), hex32.size()),
      TraceIdFormat::kHex32);
}

bool consistent_keep(uint64_t randomness56, uint64_t threshold) {
  return mcp_otel_keep(randomness56, threshold) != 0;
}

}  // namespace mcp::control
