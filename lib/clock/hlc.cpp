#include "clock/hlc.h"

#include <algorithm>

namespace mcp::clock {

HlcMergeResult Hlc::merge(uint64_t remote_packed, uint64_t physical_ns) noexcept {
  const uint64_t physical_ms = physical_ns / 1'000'000;
  const uint64_t remote_ms = remote_packed >> kHlcLogicalBits;
  const auto max_ahead = static_cast<uint64_t>(options_.max_remote_ahead.count());
  if (remote_ms > physical_ms + max_ahead) {
    rejected_remote_.fetch_add(1, std::memory_order_relaxed);
    return {now(physical_ns), false};
  }
  // The three cases of the paper (local ahead, remote ahead, physical ahead; equal parts take
  // max(counter) + 1) are exactly the max over the packed values.
  const uint64_t floor = physical_ms << kHlcLogicalBits;
  uint64_t last = last_.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = std::max({last + 1, remote_packed + 1, floor});
  } while (!last_.compare_exchange_weak(last, next, std::memory_order_relaxed));
  if ((next & kHlcLogicalMask) == 0 && next != floor) counter_overflows_.fetch_add(1, std::memory_order_relaxed);
  merged_.fetch_add(1, std::memory_order_relaxed);
  return {next, true};
}

HlcStats Hlc::stats() const noexcept {
  return {merged_.load(std::memory_order_relaxed), rejected_remote_.load(std::memory_order_relaxed),
          counter_overflows_.load(std::memory_order_relaxed)};
}

}  // namespace mcp::clock
