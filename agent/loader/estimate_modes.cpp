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

double t999(uint64_t df) {
  static constexpr std::array<double, 30> kTable{636.6, 31.60, 12.92, 8.610, 6.869, 5.959, 5.408, 5.041, 4.781, 4.587,
                                                 4.437, 4.318, 4.221, 4.140, 4.073, 4.015, 3.965, 3.922, 3.883, 3.850,
                                                 3.819, 3.792, 3.768, 3.745, 3.725, 3.707, 3.690, 3.674, 3.659, 3.646};
  if (df == 0) return kTable[0];
  if (df <= kTable.size()) return kTable[df - 1];
  return kZ + 10.6 / static_cast<double>(df);  // within 0.02 of the exact quantile past 30
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
  calls_pois_var_ += k / (p * p);
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
  if (!estimable()) return {0, 0, false};
  const double z = kZ, z2 = kZ * kZ;
  const double raw = calls_sum_ + windows_sum_;
  const double p = last_p_ > 0 ? last_p_ : 1;
  // Call sampling: a Poisson score interval on the kept count (sound from zero up, where the
  // normal one is not), in calls: k_eff kept events each standing for `scale` calls.
  double c_lo = 0, c_hi = 0;
  if (ticks_) {
    const double k = calls_pois_var_ > 0 ? calls_sum_ * calls_sum_ / calls_pois_var_ : 0;
    const double scale = k > 0 ? calls_sum_ / k : 1 / p;
    const double root = z * std::sqrt(k + z2 / 4);
    c_lo = scale * std::max(0.0, k - (k + z2 / 2 - root));
    c_hi = scale * (z2 / 2 + root);
  }
  // Windows: the successive-difference variance of the per-window counts with Student's t
  // for their number, floored by their Poisson spread (a window that kept nothing: z^2 / p).
  double w_dev = 0;
  if (windows_) {
    double var = windows_ >= 2 ? static_cast<double>(windows_) / (2.0 * static_cast<double>(windows_ - 1)) * sq_diffs_
                               : last_x_ * last_x_;  // one window says nothing of its spread: its size is the spread
    var = std::max(var, poisson_var_);
    w_dev = t999(windows_ >= 2 ? windows_ - 1 : 1) * std::sqrt(var);
    if (windows_kept_ == 0) w_dev = std::max(w_dev, z2 / p);
  }
  const double g = estimate > 0 && raw > 0 ? estimate / raw : 1;
  const double lo = estimate - g * std::sqrt(c_lo * c_lo + w_dev * w_dev);
  const double hi = estimate + g * (std::sqrt(c_hi * c_hi + w_dev * w_dev) + bias_);
  return {std::max(0.0, lo), hi, true};
}

}  // namespace mcp::loader
