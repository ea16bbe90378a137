// DriftCalibrator: maps the kernel's monotonic clock (event ktime) to wall-clock time.
//
// Contract:
// - sample() takes bracket_tries reads of (monotonic, realtime, monotonic) and keeps the try
//   with the narrowest monotonic bracket; its midpoint is paired with the realtime read. A
//   sample whose best bracket is still wider than max_bracket_ns (the thread was preempted on
//   every try) is discarded and counted.
// - Each accepted sample refits wall - mono = a + b * mono by least squares over a sliding
//   window of the last `window` samples (x centred, in seconds; y relative to the oldest point),
//   and publishes the mapping. drift_ppm = b * 1e6.
// - Step: when a new sample's residual against the current mapping exceeds
//   max(step_floor_ns, step_sigmas * residual sd), the wall clock was stepped (settimeofday,
//   NTP step, resume from suspend). The window is dropped and the mapping re-anchored on the
//   new sample at once, keeping the previous slope until min_points new samples exist, so no
//   pre-step point bends the new fit.
// - Drift-rate change: a quadratic fit over the last rate_window estimates d(drift)/dt. When it
//   exceeds max_drift_rate_ppm_per_s (and is significant against its own standard error) the
//   calibrator is kDegraded: older points are trimmed to the rate window, the published mapping
//   is the tangent at the newest sample of a quadratic over the last tracking_window, and
//   recommended_interval() drops to fast_interval. After stable_samples calm checks in a row it
//   is kGood again: the window restarts from the last tracking_window and regrows.
// - Quality: kWarmingUp until min_points samples exist (at start, after a step); kDegraded as
//   above; kGood otherwise. Before the first accepted sample has_mapping() is false and
//   to_wall_ns() returns its argument unchanged.
// - to_wall_ns() and mapping() are lock-free (seqlock) and safe from any thread; tick(),
//   sample(), add_sample() and stats() serialise on an internal mutex.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>

#include "clock/clock_source.h"
#include "clock/wall_mapping.h"

namespace mcp::clock {

enum class ClockQuality : uint8_t { kWarmingUp, kGood, kDegraded };
std::string_view to_string(ClockQuality quality);

struct CalibratorOptions {
  std::chrono::nanoseconds interval{std::chrono::milliseconds(500)};
  std::chrono::nanoseconds fast_interval{std::chrono::milliseconds(100)};
  std::size_t window = 2048;
  std::size_t min_points = 8;
  int bracket_tries = 5;
  int64_t max_bracket_ns = 200'000;
  int64_t step_floor_ns = 1'000'000;
  double step_sigmas = 20.0;
  double max_drift_rate_ppm_per_s = 0.5;
  double drift_rate_significance = 4.0;  // |rate| must also exceed this many standard errors
  std::chrono::nanoseconds rate_window{std::chrono::seconds(16)};
  std::chrono::nanoseconds tracking_window{std::chrono::seconds(4)};
  std::size_t stable_samples = 16;
};

struct ClockSample {
  int64_t mono_ns = 0;     // bracket midpoint
  int64_t real_ns = 0;
  int64_t bracket_ns = 0;  // width of the monotonic bracket around the realtime read
};

struct CalibratorStats {
  ClockQuality quality = ClockQuality::kWarmingUp;
  double drift_ppm = 0.0;
  double drift_rate_ppm_per_s = 0.0;  // last quadratic estimate (0 until the rate window fills)
  double residual_ns = 0.0;           // sd of the fit residuals
  std::size_t points = 0;             // samples in the window
  uint64_t samples = 0;               // accepted samples
  uint64_t discarded_samples = 0;     // bracket too wide
  uint64_t steps = 0;
  int64_t last_step_ns = 0;           // size of the last detected step (new - predicted)
  int64_t last_bracket_ns = 0;
  std::chrono::nanoseconds recommended_interval{0};
};

class DriftCalibrator {
 public:
  explicit DriftCalibrator(ClockSource& source, CalibratorOptions options = {});
  DriftCalibrator(const DriftCalibrator&) = delete;
  DriftCalibrator& operator=(const DriftCalibrator&) = delete;

  // Samples the source and updates; returns the delay the caller should wait before the next tick.
  std::chrono::nanoseconds tick();
  ClockSample sample();
  // Feeds one sample (from sample() or elsewhere). Returns false when it was discarded.
  bool add_sample(const ClockSample& s);

  uint64_t to_wall_ns(uint64_t mono_ns) const noexcept {
    return static_cast<uint64_t>(published_.load().wall_ns(static_cast<int64_t>(mono_ns)));
  }
  WallMapping mapping() const noexcept { return published_.load(); }
  bool has_mapping() const noexcept { return has_mapping_.load(std::memory_order_acquire); }

  std::chrono::nanoseconds recommended_interval() const;
  CalibratorStats stats() const;
  const CalibratorOptions& options() const { return options_; }

 private:
  struct Point {
    int64_t mono;
    int64_t offset;  // real - mono
  };
  void refit_locked();
  // Publishes wall = mono + base + value at mono_anchor, with slope_ as the drift.
  void publish_locked(int64_t mono_anchor, int64_t base, double value);
  int64_t predicted_offset_locked(int64_t mono) const;
  bool in_fast_mode_locked() const;

  ClockSource& source_;
  CalibratorOptions options_;
  PublishedMapping published_;
  std::atomic<bool> has_mapping_{false};

  mutable std::mutex mutex_;
  std::deque<Point> window_;
  ClockQuality quality_ = ClockQuality::kWarmingUp;
  double slope_ = 0.0;        // d offset / d mono, dimensionless
  double residual_ns_ = 0.0;
  double drift_rate_ppm_per_s_ = 0.0;
  bool degraded_ = false;
  std::size_t calm_checks_ = 0;
  WallMapping current_;
  uint64_t samples_ = 0;
  uint64_t discarded_ = 0;
  uint64_t steps_ = 0;
  int64_t last_step_ns_ = 0;
  int64_t last_bracket_ns_ = 0;
};

}  // namespace mcp::clock
