// RateWindow: sliding-window rate of a monotonic counter (events per second).
//
// Contract:
// - Fed with the counter's cumulative value (e.g. a per-CPU counter summed over CPUs) and a
//   monotonic timestamp in ns. The first observation only sets the baseline.
// - The increase since the previous observation is spread over the time between the two
//   observations, bucket by bucket, so a late tick (a gap) is attributed to the buckets it
//   covers rather than to the bucket it arrives in.
// - A value below the previous one is a counter reset (map recreated, probe re-attached):
//   the new value itself counts as the increase since the reset.
// - rate_per_s() covers at most the configured window ending at the last observation; before a
//   full window has elapsed it divides by the time actually observed (no start-up dip).
//   A timestamp that goes backwards is treated as equal to the previous one.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mcp::control {

struct RateWindowConfig {
  std::chrono::nanoseconds bucket{std::chrono::milliseconds(100)};
  std::size_t buckets = 10;  // window = bucket * buckets (default 1 s)
};

class RateWindow {
 public:
  explicit RateWindow(RateWindowConfig config = {});

  void observe(uint64_t now_ns, uint64_t cumulative);

  // Events per second over the whole window, or 0 when less than 1 ns has been observed.
  double rate_per_s() const;
  // Same, over the most recent `span` (rounded up to whole buckets, at most the window):
  // a faster, noisier estimate.
  double rate_per_s(std::chrono::nanoseconds span) const;

  // Events counted over the covered part of the window, and how long that part is.
  double count_in_window() const;
  std::chrono::nanoseconds covered() const;

  bool has_rate() const { return started_ && last_ns_ > first_ns_; }
  uint64_t resets() const { return resets_; }
  std::chrono::nanoseconds window() const {
    return std::chrono::nanoseconds(bucket_ns_ * static_cast<int64_t>(slots_.size()));
  }
  void clear();

 private:
  struct Slot {
    int64_t index = -1;  // absolute bucket number (ts / bucket_ns), -1 = empty
    double count = 0;
  };
  void add(int64_t index, double count);
  // Sum and covered ns of the most recent `nbuckets` buckets ending at the last observation.
  std::pair<double, int64_t> tail(std::size_t nbuckets) const;

  int64_t bucket_ns_;
  std::vector<Slot> slots_;
  bool started_ = false;
  uint64_t first_ns_ = 0;
  uint64_t last_ns_ = 0;
  uint64_t last_value_ = 0;
  uint64_t resets_ = 0;
};

}  // namespace mcp::control
