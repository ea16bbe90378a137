// Trace-id sampling argument and the userspace reference of the kernel's consistent decision.
//
// Contract:
// - One spelling for `--trace-id-arg` and the config's `trace_id`: "N:hex32|N:bytes16|N:u64".
//   N is the probed function's argument index 0..5; that argument is a pointer to the trace id
//   as 32 hex characters (`hex32`) or 16 raw bytes (`bytes16`), or the id itself (`u64`). A
//   bare "N" is rejected: the CLI once read it as hex32 and the config as u64.
//   parse_trace_id_arg throws mcp::Error (usage) with a one-line reason; trace_id_arg_error
//   returns the reason (empty: parsed) for callers with their own positions.
// - Randomness (W3C trace-context level 2, as OpenTelemetry threshold sampling uses it): the
//   last 7 bytes of the 16-byte trace id read as a big-endian integer, i.e. 56 bits.
//     bytes16: r = id[9] << 48 | id[10] << 40 | ... | id[15]
//     hex32:   r = the last 14 hex digits (characters 18..31, either case) as a hex number.
//              All 32 characters are read (the kernel records the whole id with the event);
//              a non-hex one among them means "no trace id": the kernel then falls back to
//              bpf_get_prandom_u32 and the event carries no trace id.
// - Decision: OpenTelemetry consistent probability sampling, the kernel's own code
//   (bpf/sample_math.h, mcp_otel_keep): with A the acceptance threshold (p = A / 2^64),
//     T = 2^56 - (A >> 8)   (OTel's rejection threshold; 0 when A == UINT64_MAX)
//     keep  iff  r >= T
//   so every hop with the same threshold, and an OTel SDK at the same p, keep the same trace
//   ids, and a lower threshold keeps a subset of what a higher one keeps.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mcp::control {

enum class TraceIdFormat : uint8_t { kHex32 = 0, kBytes16 = 1, kU64 = 2 };

struct TraceIdArg {
  uint8_t arg_index = 0;  // 0..5
  TraceIdFormat format = TraceIdFormat::kHex32;
  bool operator==(const TraceIdArg&) const = default;
};

inline constexpr uint64_t kRandomness56Mask = (uint64_t{1} << 56) - 1;

TraceIdArg parse_trace_id_arg(std::string_view text);
std::string trace_id_arg_error(std::string_view text, TraceIdArg& out);
std::string_view to_string(TraceIdFormat format);

// `raw` is what the probe reads at the argument's address: 32 characters (hex32) or 16 bytes
// (bytes16). nullopt when too short or, for hex32, when one of the 32 characters is not hex.
std::optional<uint64_t> trace_randomness56(std::span<const uint8_t> raw, TraceIdFormat format);
std::optional<uint64_t> trace_randomness56_hex(std::string_view hex32);

bool consistent_keep(uint64_t randomness56, uint64_t threshold);

}  // namespace mcp::control
