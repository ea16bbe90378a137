// ClockSource: the two clocks the calibrator compares, behind an interface so tests can drive
// it with a simulated clock.
//
// Contract:
// - monotonic_ns() is the clock the kernel stamps events with (CLOCK_MONOTONIC, what
//   bpf_ktime_get_ns returns); realtime_ns() is the wall clock (CLOCK_REALTIME), ns since the
//   epoch. Both are safe to call from any thread.
// - SimulatedClockSource models "true" time as its monotonic clock. Every read costs
//   read_cost_ns of true time (plus, with probability preempt_probability, a preemption of
//   preempt_ns), so brackets have a realistic width. Its realtime runs drift_ppm fast relative to
//   monotonic, the drift itself may ramp at drift_rate_ppm_per_s, each realtime read carries
//   Gaussian jitter (standard deviation jitter_ns), and step_realtime() jumps it like
//   settimeofday. true_realtime_at() gives the noise-free value for assertions.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>

namespace mcp::clock {

class ClockSource {
 public:
  virtual ~ClockSource() = default;
  virtual int64_t monotonic_ns() = 0;
  virtual int64_t realtime_ns() = 0;
};

// clock_gettime(CLOCK_MONOTONIC / CLOCK_REALTIME).
class SystemClockSource final : public ClockSource {
 public:
  int64_t monotonic_ns() override;
  int64_t realtime_ns() override;
};

std::shared_ptr<ClockSource> system_clock_source();
// `clock`, or system_clock_source() when it is null: for parts whose clock is optional (tests
// pass a simulated one).
std::shared_ptr<ClockSource> clock_or_system(std::shared_ptr<ClockSource> clock);

struct SimulatedClockOptions {
  int64_t monotonic_start_ns = 1'000'000'000'000;          // 1000 s after boot
  int64_t realtime_start_ns = 1'700'000'000'000'000'000;   // Nov 2023
  double drift_ppm = 0.0;
  double drift_rate_ppm_per_s = 0.0;
  double jitter_ns = 0.0;
  int64_t read_cost_ns = 25;
  double preempt_probability = 0.0;
  int64_t preempt_ns = 0;
  uint64_t seed = 1;
};

class SimulatedClockSource final : public ClockSource {
 public:
  explicit SimulatedClockSource(SimulatedClockOptions options = {});

  int64_t monotonic_ns() override;
  int64_t realtime_ns() override;

  void advance(int64_t ns);              // let true time pass (a simulated sleep)
  void step_realtime(int64_t delta_ns);  // settimeofday / NTP step
  void set_drift_ppm(double ppm);        // from now on; realtime stays continuous
  void set_drift_rate_ppm_per_s(double rate);

  int64_t now_monotonic_ns() const;      // without the cost of a read
  double drift_ppm_now() const;
  int64_t true_realtime_at(int64_t monotonic_ns) const;

 private:
  void consume_read_locked();
  void reanchor_locked();
  int64_t true_realtime_locked(int64_t monotonic_ns) const;

  mutable std::mutex mutex_;
  SimulatedClockOptions options_;
  int64_t now_ns_;
  // Realtime is continuous and piecewise quadratic: anchored at (anchor_mono_, anchor_real_)
  // with drift anchor_ppm_ there, changing at options_.drift_rate_ppm_per_s.
  int64_t anchor_mono_;
  int64_t anchor_real_;
  double anchor_ppm_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> jitter_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace mcp::clock
