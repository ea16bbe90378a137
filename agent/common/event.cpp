#include "common/event.h"

#include <cmath>
#include <cstring>

namespace mcp {

std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kUprobe: return "uprobe";
    case EventKind::kUretprobe: return "uretprobe";
    case EventKind::kSyscall: return "syscall";
    case EventKind::kCuda: return "cuda";
  }
  return "unknown";
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

std::string_view Event::comm_view() const {
  return std::string_view(comm.data(), strnlen(comm.data(), comm.size()));
}

}  // namespace mcp
