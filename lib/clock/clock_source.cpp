#include "clock/clock_source.h"

#include <cmath>
#include <ctime>

namespace mcp::clock {
namespace {
int64_t read_clock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t SystemClockSource::monotonic_ns() { return read_clock(CLOCK_MONOTONIC); }
int64_t SystemClockSource::realtime_ns() { return read_clock(CLOCK_REALTIME); }

std::shared_ptr<ClockSource> system_clock_source() {
  static const auto source = std::make_shared<SystemClockSource>();
  return source;
}

std::shared_ptr<ClockSource> clock_or_system(std::shared_ptr<ClockSource> clock) {
  return clock ? std::move(clock) : system_clock_source();
}

SimulatedClockSource::SimulatedClockSource(SimulatedClockOptions options)
    : options_(options),
      now_ns_(options.monotonic_start_ns),
      anchor_mono_(options.monotonic_start_ns),
      anchor_real_(options.realtime_start_ns),
      anchor_ppm_(options.drift_ppm),
      rng_(options.seed),
      jitter_(0.0, options.jitter_ns > 0 ? options.jitter_ns : 1.0) {}

void SimulatedClockSource::consume_read_locked() {
  now_ns_ += options_.read_cost_ns;
  if (options_.preempt_probability > 0 && uniform_(rng_) < options_.preempt_probability) {
    now_ns_ += options_.preempt_ns;
  }
}

int64_t SimulatedClockSource::monotonic_ns() {
  std::lock_guard lock(mutex_);
  consume_read_locked();
  return now_ns_;
}

int64_t SimulatedClockSource::realtime_ns() {
  std::lock_guard lock(mutex_);
  consume_read_locked();
  const double noise = options_.jitter_ns > 0 ? jitter_(rng_) : 0.0;
  return true_realtime_locked(now_ns_) + std::llround(noise);
}

void SimulatedClockSource::advance(int64_t ns) {
  std::lock_guard lock(mutex_);
  now_ns_ += ns;
}

void SimulatedClockSource::step_realtime(int64_t delta_ns) {
  std::lock_guard lock(mutex_);
  reanchor_locked();
  anchor_real_ += delta_ns;
}

void SimulatedClockSource::set_drift_ppm(double ppm) {
  std::lock_guard lock(mutex_);
  reanchor_locked();
  anchor_ppm_ = ppm;
}

void SimulatedClockSource::set_drift_rate_ppm_per_s(double rate) {
  std::lock_guard lock(mutex_);
  reanchor_locked();
  options_.drift_rate_ppm_per_s = rate;
}

int64_t SimulatedClockSource::now_monotonic_ns() const {
  std::lock_guard lock(mutex_);
  return now_ns_;
}

double SimulatedClockSource::drift_ppm_now() const {
  std::lock_guard lock(mutex_);
  return anchor_ppm_ + options_.drift_rate_ppm_per_s * (now_ns_ - anchor_mono_) * 1e-9;
}

int64_t SimulatedClockSource::true_realtime_at(int64_t monotonic_ns) const {
  std::lock_guard lock(mutex_);
  return true_realtime_locked(monotonic_ns);
}

void SimulatedClockSource::reanchor_locked() {
  const int64_t real = true_realtime_locked(now_ns_);
  anchor_ppm_ += options_.drift_rate_ppm_per_s * (now_ns_ - anchor_mono_) * 1e-9;
  anchor_mono_ = now_ns_;
  anchor_real_ = real;
}

int64_t SimulatedClockSource::true_realtime_locked(int64_t monotonic_ns) const {
  // Integral of the drift since the anchor: ppm0 * dt + rate * dt^2 / 2 (dt in s for the rate).
  const double dt = static_cast<double>(monotonic_ns - anchor_mono_);
  const double extra =
      1e-6 * (anchor_ppm_ * dt + 0.5 * options_.drift_rate_ppm_per_s * dt * dt * 1e-9);
  return anchor_real_ + (monotonic_ns - anchor_mono_) + std::llround(extra);
}

}  // namespace mcp::clock
