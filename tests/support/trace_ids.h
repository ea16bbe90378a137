// Trace ids of the test workload and OpenTelemetry's threshold arithmetic, written out here
// from the specs (not through the code under test), for tests that check what the kernel kept.
//   workload_trace_ids(n, seed): the ids `mcp-workload traceid N SEED` passes, in call order:
//     two splitmix64 outputs (hi, lo) each, the W3C id being hi then lo big-endian.
//   otel_th(a): the rejection threshold T = 2^56 - (A >> 8) of acceptance threshold A in 14 hex
//     digits, trailing zeros trimmed ("0" keeps all), as tracestate ot=th: spells it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mcp::test {

struct W3cTraceId {
  uint64_t hi = 0, lo = 0;
  uint64_t randomness() const { return lo & ((uint64_t{1} << 56) - 1); }  // OTel's R
  std::string bytes() const {  // the 16 bytes of an OTLP trace_id
    std::string out;
    for (const uint64_t half : {hi, lo})
      for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(half >> shift));
    return out;
  }
  std::string hex() const {  // 32 lowercase hex digits
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                  static_cast<unsigned long long>(lo));
    return buf;
  }
};

inline uint64_t workload_splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline std::vector<W3cTraceId> workload_trace_ids(size_t n, uint64_t seed) {
  std::vector<W3cTraceId> out(n);
  for (auto& id : out) {
    id.hi = workload_splitmix(seed);
    id.lo = workload_splitmix(seed);
  }
  return out;
}

inline uint64_t otel_rejection_threshold(uint64_t a) {
  return a == UINT64_MAX ? 0 : (uint64_t{1} << 56) - (a >> 8);
}

inline std::string otel_th(uint64_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%014llx", static_cast<unsigned long long>(otel_rejection_threshold(a)));
  std::string s(buf);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  return s;
}

}  // namespace mcp::test
