#include "loader/estimate_modes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace mcp::loader {
namespace {

// A share of a CPU's time as the summary says it: over 100% means the measured trap cost
// times the traps exceeds the time (the cost is taken high on purpose).
std::string pct(double share) { return share >= 1 ? std::string("all") : fmt::format("{:.1f}%", 100 * share); }

}  // namespace

const char* estimate_mode_name(EstimateMode m) {
  switch (m) {
    case EstimateMode::kCalls: return "calls";
    case EstimateMode::kWindows: return "windows";
    case EstimateMode::kUnestimable: return "none";
  }
  return "?";
}

double t95(uint64_t df) {
  static constexpr std::array<double, 30> kTable{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return kTable[0];
  if (df <= kTable.size()) return kTable[df - 1];
  return 1.96 + 2.4 / static_cast<double>(df);  // within 0.002 of the exact quantile past 30
}

EstimateTracker::EstimateTracker(EstimatePolicy policy, int64_t now_ns, int64_t period_ns)
    : policy_(policy), reason_("probation: sampling calls first"), period_ns_(period_ns), phase_start_ns_(now_ns) {}

void EstimateTracker::enter(EstimateMode m, int64_t now_ns, std::string reason) {
  mode_ = m;
  reason_ = std::move(reason);
  phase_start_ns_ = now_ns;
  high_share_windows_ = 0;
}

bool EstimateTracker::on_calls_tick(int64_t now_ns, uint64_t kept, double p, uint64_t own_traps, double trap_share,
                                    double trap_cost_ns, bool may_window) {
  if (mode_ != EstimateMode::kCalls || !(p > 0)) return false;
  last_p_ = p;
  const double k = static_cast<double>(kept);
  calls_sum_ += k / p;
  calls_var_ += k * (1 - p) / (p * p);
  calls_kept_ += kept;
  spent_ns_ += static_cast<double>(own_traps) * trap_cost_ns;
  // Smoothed over ticks: one quiet tick of a busy loop must not open windows.
  last_share_ = ticks_++ ? std::max(trap_share, (trap_share + last_share_) / 2) : trap_share;
  const int64_t probation = std::max<int64_t>(policy_.probation.count(), policy_.probation_periods * period_ns_);
  if (!may_window) return false;
  if (last_share_ <= policy_.max_trap_share) {
    if (now_ns - phase_start_ns_ < probation) return false;
    enter(EstimateMode::kWindows, now_ns,
          fmt::format("traps take {} of a CPU (at most {}): time windows estimate", pct(last_share_),
                      pct(policy_.max_trap_share)));
    return true;
  }
  if (spent_ns_ < static_cast<double>(policy_.calls_budget.count())) {
    reason_ = fmt::format("traps take {} of a CPU: every call is sampled (windows would miss what the trap slows)",
                          pct(last_share_));
    return false;
  }
  enter(EstimateMode::kUnestimable, now_ns,
        fmt::format("traps take {} of a CPU and call sampling spent its {:g} s of traps: the workload runs at the "
                    "trap's pace inside a window",
                    pct(last_share_), std::chrono::duration<double>(policy_.calls_budget).count()));
  return true;
}

void EstimateTracker::sample_calls(int64_t now_ns, std::string reason) {
  if (mode_ != EstimateMode::kUnestimable) enter(EstimateMode::kCalls, now_ns, std::move(reason));
}

bool EstimateTracker::on_window(int64_t now_ns, uint64_t kept, double p, double trap_share) {
  if (!(p > 0)) return false;
  last_p_ = p;
  const double x = static_cast<double>(kept) / p;
  if (windows_++) sq_diffs_ += (x - last_x_) * (x - last_x_);
  last_x_ = x;
  windows_sum_ += x;
  windows_kept_ += kept;
  poisson_var_ += static_cast<double>(kept) / (p * p);
  last_share_ = trap_share;
  if (trap_share >= kMaxBoundedShare) {
    // The workload ran at the trap's pace in this window: what it would have done untraced
    // is not bounded by what the window saw.
    unbounded_ = true;
    if (mode_ == EstimateMode::kUnestimable) return false;
    enter(EstimateMode::kUnestimable, now_ns,
          fmt::format("traps took {} of a CPU in a window: the workload ran at the trap's pace", pct(trap_share)));
    return true;
  }
  bias_ += x * trap_share / (1 - trap_share);
  high_share_windows_ = trap_share > policy_.max_trap_share ? high_share_windows_ + 1 : 0;
  if (mode_ != EstimateMode::kWindows || high_share_windows_ < 3) return false;
  if (spent_ns_ < static_cast<double>(policy_.calls_budget.count())) {
    enter(EstimateMode::kCalls, now_ns,
          fmt::format("traps took {} of a CPU in windows: sampling calls", pct(trap_share)));
  } else {
    enter(EstimateMode::kUnestimable, now_ns,
          fmt::format("traps took {} of a CPU in windows and call sampling spent its budget", pct(trap_share)));
  }
  return true;
}

EstimateRange EstimateTracker::range(double estimate) const {
  if (mode_ == EstimateMode::kUnestimable || unbounded_) return {0, 0, false};
  const double raw = calls_sum_ + windows_sum_;
  const double p = last_p_ > 0 ? last_p_ : 1;
  // None kept: a Poisson bound on what the draw (or windows, for calls spread in time) missed.
  if (raw <= 0) return {0, 3 / p, true};
  const double g = estimate > 0 ? estimate / raw : 1;
  double var_w = 0, t = 0;
  if (windows_ >= 2) {
    var_w = static_cast<double>(windows_) / (2.0 * static_cast<double>(windows_ - 1)) * sq_diffs_;
    t = t95(windows_ - 1);
  } else if (windows_ == 1) {
    var_w = last_x_ * last_x_;  // one window says nothing of its own spread: its size is the spread
    t = t95(1);
  }
  var_w = std::max(var_w, poisson_var_);
  const double half = g * std::sqrt(4 * calls_var_ + t * t * var_w);
  double hi = estimate + half + g * bias_;
  // A phase that kept nothing may still have missed up to a Poisson bound's worth.
  if (calls_kept_ == 0 && ticks_) hi += g * 3 / p;
  if (windows_ && windows_kept_ == 0) hi += g * 3 / p;
  return {std::max(0.0, estimate - half), hi, true};
}

}  // namespace mcp::loader
