// Hlc: hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014), lock-free.
//
// Contract:
// - A timestamp is (physical ms since the epoch, 16-bit logical counter), packed into 64 bits as
//   physical << 16 | logical; packed order is timestamp order, and 0 means "not stamped".
// - now(physical_ns) returns a timestamp strictly greater than every one this Hlc has returned or
//   merged, and never behind the physical clock (physical part >= physical_ns / 1e6). It is one
//   CAS on the packed value: next = max(physical_ms << 16, last + 1). When the counter is full the
//   +1 carries into the physical part: the clock runs 1 ms ahead instead of wrapping.
// - merge(remote, physical_ns) stamps a receive: the result is greater than both the local last
//   value and `remote`, so a receive is ordered after its send. A remote whose physical part is
//   more than max_remote_ahead ahead of physical_ns is rejected (counted, not merged): a single
//   node with a broken clock must not drag every other node's HLC into the future. Hence the
//   local HLC stays within max_remote_ahead (plus counter carries) of its physical clock.
// - All members are safe to call concurrently from any number of threads.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace mcp::clock {

inline constexpr int kHlcLogicalBits = 16;
inline constexpr uint64_t kHlcLogicalMask = (uint64_t{1} << kHlcLogicalBits) - 1;
inline constexpr uint64_t kHlcPhysicalMax = (uint64_t{1} << (64 - kHlcLogicalBits)) - 1;

struct HlcTimestamp {
  uint64_t physical_ms = 0;
  uint16_t logical = 0;
  friend auto operator<=>(const HlcTimestamp&, const HlcTimestamp&) = default;
};

// physical_ms is truncated to 48 bits (enough for ms since the epoch until year 10889).
constexpr uint64_t hlc_pack(HlcTimestamp ts) {
  return ((ts.physical_ms & kHlcPhysicalMax) << kHlcLogicalBits) | ts.logical;
}
constexpr HlcTimestamp hlc_unpack(uint64_t packed) {
  return {packed >> kHlcLogicalBits, static_cast<uint16_t>(packed & kHlcLogicalMask)};
}

struct HlcOptions {
  std::chrono::milliseconds max_remote_ahead{500};
};

struct HlcStats {
  uint64_t merged = 0;            // remote timestamps accepted
  uint64_t rejected_remote = 0;   // remote timestamps too far ahead of the physical clock
  uint64_t counter_overflows = 0; // the logical counter was full and carried into the ms part
};

struct HlcMergeResult {
  uint64_t packed = 0;   // the receive timestamp (a plain now() when rejected)
  bool accepted = true;
};

class Hlc {
 public:
  explicit Hlc(HlcOptions options = {}) : options_(options) {}

  uint64_t now(uint64_t physical_ns) noexcept {
    const uint64_t floor = (physical_ns / 1'000'000) << kHlcLogicalBits;
    uint64_t last = last_.load(std::memory_order_relaxed);
    uint64_t next;
    do {
      next = last + 1 > floor ? last + 1 : floor;
    } while (!last_.compare_exchange_weak(last, next, std::memory_order_relaxed));
    if ((last & kHlcLogicalMask) == kHlcLogicalMask && next == last + 1) [[unlikely]] {
      counter_overflows_.fetch_add(1, std::memory_order_relaxed);
    }
    return next;
  }
  HlcTimestamp now_ts(uint64_t physical_ns) noexcept { return hlc_unpack(now(physical_ns)); }

  HlcMergeResult merge(uint64_t remote_packed, uint64_t physical_ns) noexcept;

  uint64_t last() const noexcept { return last_.load(std::memory_order_relaxed); }
  HlcStats stats() const noexcept;
  const HlcOptions& options() const { return options_; }

 private:
  HlcOptions options_;
  alignas(64) std::atomic<uint64_t> last_{0};
  alignas(64) std::atomic<uint64_t> merged_{0};
  std::atomic<uint64_t> rejected_remote_{0};
  std::atomic<uint64_t> counter_overflows_{0};
};

}  // namespace mcp::clock
