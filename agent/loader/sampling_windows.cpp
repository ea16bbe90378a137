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
  do pending_ = next_piece();
  while (pending_.start_ns + pending_.length_ns <= now_ns);
  if (pending_.start_ns < now_ns) pending_ = {now_ns, pending_.start_ns + pending_.length_ns - now_ns};
}

void WindowSchedule::plan_period(int64_t start_ns) {
  period_start_ = start_ns;
  const int64_t u = std::uniform_int_distribution<int64_t>(0, period_ns_ - 1)(rng_);
  a0_ = u;
  b0_ = std::min(u + window_ns_, period_ns_);
  b1_ = u + window_ns_ - b0_;  // the part past the period's end wraps to its start
  handed_ = 0;
}

WindowSchedule::Piece WindowSchedule::next_piece() {
  for (;;) {
    if (handed_ == 0) {
      handed_ = 1;
      if (b1_ > 0) return {period_start_, b1_};
    }
    if (handed_ == 1) {
      handed_ = 2;
      return {period_start_ + a0_, b0_ - a0_};
    }
    plan_period(period_start_ + period_ns_);
  }
}

WindowSchedule::Decision WindowSchedule::at(int64_t now_ns, bool is_open) {
  if (is_open) {
    // A window owed before this one ends (contiguous, or this one started late) extends it
    // by its own length: the time counted stays the sum of the windows.
    while (pending_.start_ns <= close_at_) {
      close_at_ += pending_.length_ns;
      pending_ = next_piece();
    }
    if (now_ns < close_at_) return {true, close_at_};
    return {false, now_ns};
  }
  if (now_ns >= pending_.start_ns) return {true, now_ns};
  return {false, pending_.start_ns};
}

void WindowSchedule::opened(int64_t opened_ns) {
  close_at_ = opened_ns + pending_.length_ns;
  pending_ = next_piece();
}

void WindowSchedule::closed() { close_at_ = 0; }

}  // namespace mcp::loader
