#include "common/event.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "sample_math.h"

namespace mcp {

std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kUprobe: return "uprobe";
    case EventKind::kUretprobe: return "uretprobe";
    case EventKind::kSyscall: return "syscall";
    case EventKind::kCuda: return "cuda";
    case EventKind::kUsdt: return "usdt";
  }
  return "unknown";
}

std::string_view string_arg_attribute(unsigned n) {
  static constexpr std::string_view kNames[] = {"arg0", "arg1", "arg2", "arg3", "arg4", "arg5"};
  return n < std::size(kNames) ? kNames[n] : std::string_view();
}

double threshold_to_probability(uint64_t threshold) {
  if (threshold == UINT64_MAX) return 1.0;
  return std::ldexp(static_cast<double>(threshold), -64);
}

uint64_t probability_to_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return UINT64_MAX;
  const double t = std::ldexp(p, 64);
  if (t >= 18446744073709551615.0) return UINT64_MAX - 1;
  return static_cast<uint64_t>(t);
}

std::string otel_th(uint64_t threshold) {
  const uint64_t t = mcp_otel_threshold(threshold);
  if (t == 0) return "0";
  if (t > MCP_RANDOMNESS_MASK) return "";  // keeps nothing: no OTel spelling, never on a kept event
  char buf[15];
  snprintf(buf, sizeof(buf), "%014llx", static_cast<unsigned long long>(t));
  std::string out(buf);
  while (out.size() > 1 && out.back() == '0') out.pop_back();
  return out;
}

std::string_view Event::comm_view() const {
  return std::string_view(comm.data(), strnlen(comm.data(), comm.size()));
}

}  // namespace mcp
