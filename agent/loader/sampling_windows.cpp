#include "loader/sampling_windows.h"

#include <algorithm>

namespace mcp::loader {

WindowPlan plan_windows(double rate) {
  if (!(rate < kWindowMaxRate)) return {1, std::min(rate, 1.0)};
  const double f = std::max(rate, kWindowMinFraction);
  return {f, std::min(1.0, rate / f)};
}

WindowSchedule::WindowSchedule(double fraction, std::chrono::nanoseconds window, uint64_t seed, int64_t now_ns)
    : fraction_(fraction),
      window_ns_(window.count()),
      period_ns_(static_cast<int64_t>(static_cast<double>(window.count()) / fraction)),
      rng_(seed) {
  // The first period starts a uniform share of a period ago: now is as random as any instant.
  plan_period(now_ns - std::uniform_int_distribution<int64_t>(0, period_ns_ - 1)(rng_));
}

void WindowSchedule::plan_period(int64_t start_ns) {
  period_start_ = start_ns;
  const int64_t u = std::uniform_int_distribution<int64_t>(0, period_ns_ - 1)(rng_);
  a0_ = u;
  b0_ = std::min(u + window_ns_, period_ns_);
  a1_ = 0;
  b1_ = u + window_ns_ - b0_;  // the part past the period's end wraps to its start
}

WindowSchedule::State WindowSchedule::at(int64_t now_ns) {
  while (now_ns >= period_start_ + period_ns_) plan_period(period_start_ + period_ns_);
  const int64_t t = now_ns - period_start_;
  if (t < b1_) return {true, period_start_ + b1_};                  // the wrapped part
  if (t < a0_) return {false, period_start_ + a0_};
  if (t < b0_) return {true, period_start_ + b0_};
  return {false, period_start_ + period_ns_ + 0};                   // the next period decides
}

}  // namespace mcp::loader
