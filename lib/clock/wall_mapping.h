// WallMapping: the linear ktime -> wall-clock map the calibrator publishes, and
// PublishedMapping: a seqlock cell that hands it to any number of lock-free readers.
//
// Contract:
// - wall(mono) = wall_anchor + (mono - mono_anchor) * (1 + drift). Anchored near the newest
//   calibration sample so the extrapolated distance (and the rounding of the drift term) stays
//   small; valid in both directions.
// - PublishedMapping::load() never blocks and never returns a torn mapping: it retries while a
//   publish is in progress (publishes are rare: one per calibration sample). publish() must be
//   called from one thread at a time (the calibrator holds its own mutex around it).
#pragma once
#include <atomic>
#include <cstdint>

namespace mcp::clock {

struct WallMapping {
  int64_t mono_anchor = 0;
  int64_t wall_anchor = 0;
  double drift = 0.0;  // (d wall / d mono) - 1; +37 ppm is 37e-6

  int64_t wall_ns(int64_t mono_ns) const noexcept {
    const int64_t delta = mono_ns - mono_anchor;
    return wall_anchor + delta + static_cast<int64_t>(static_cast<double>(delta) * drift);
  }
};

class PublishedMapping {
 public:
  WallMapping load() const noexcept {
    WallMapping m;
    for (;;) {
      const uint32_t before = seq_.load(std::memory_order_acquire);
      m.mono_anchor = mono_anchor_.load(std::memory_order_relaxed);
      m.wall_anchor = wall_anchor_.load(std::memory_order_relaxed);
      m.drift = drift_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if ((before & 1) == 0 && seq_.load(std::memory_order_relaxed) == before) return m;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  void publish(const WallMapping& m) noexcept {
    const uint32_t seq = seq_.load(std::memory_order_relaxed);
    seq_.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    mono_anchor_.store(m.mono_anchor, std::memory_order_relaxed);
    wall_anchor_.store(m.wall_anchor, std::memory_order_relaxed);
    drift_.store(m.drift, std::memory_order_relaxed);
    seq_.store(seq + 2, std::memory_order_release);
  }

 private:
  // One cache line, read-mostly: readers on every CPU share it without contention.
  alignas(64) std::atomic<uint32_t> seq_{0};
  std::atomic<int64_t> mono_anchor_{0};
  std::atomic<int64_t> wall_anchor_{0};
  std::atomic<double> drift_{0.0};
};

}  // namespace mcp::clock
