// Estimate modes: whether a probe sampled below kWindowMaxRate can be counted from time
// windows, and the range its estimate holds.
//
// Windows sample time, not calls. Two things make that wrong: the trap itself (inside a
// window a call-bound workload runs at the trap's pace, so the window sees fewer calls than
// the workload makes untraced), and a workload that does not last many window periods (a
// short program, a burst). So a probe starts by sampling calls (attached, the kernel's draw
// at p: every call traps, each kept one stands for exactly 1/p calls) for a probation, and
// moves to windows only when the traps it measured took at most `max_trap_share` of the
// busiest CPU's time. That share bounds the bias of every later window: a workload that
// spends a share s of a window in traps made at most n / (1 - s) calls untraced where it
// made n (a call-bound loop loses exactly s of its time; a paced or request-driven one
// less), so each window's bound widens the range's top. Where the share stays high, call
// sampling goes on while its trap time fits `calls_budget`; beyond that nothing can give
// an estimate at this cost, and the probe says so (mode kUnestimable) instead of a number.
//
// The range (99.9%): call sampling, a Poisson score interval on the kept count; windows, the
// successive-difference variance of the per-window counts (a sum over periods with one window
// each) with Student's t for their number, floored by the counts' Poisson spread. Pure arithmetic; the
// session feeds it (loader/bpf_session.cpp). Not thread-safe: the caller locks.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mcp::loader {

enum class EstimateMode { kCalls, kWindows, kUnestimable };
const char* estimate_mode_name(EstimateMode m);

struct EstimatePolicy {
  // Sampling calls at least this long, and at least `probation_periods` window periods,
  // before windows may start: a program shorter than that is counted call by call, and the
  // trap share is measured before windows rely on it. Short, because it costs a trap a call.
  std::chrono::nanoseconds probation{std::chrono::milliseconds(200)};
  int probation_periods = 2;
  // Windows estimate only while traps take at most this share of a CPU's time (the range's
  // top widens by up to 1 / (1 - share)).
  double max_trap_share = 0.1;
  // The trap time a probe whose calls come too fast for windows may spend sampling calls.
  std::chrono::nanoseconds calls_budget{std::chrono::seconds(5)};
};

// The confidence of the ranges printed: 99.9% (z = 3.29), so that a table of dozens of
// estimates holds every truth, not all but a twentieth of them.
inline constexpr double kZ = 3.2905;

// A range of an estimate at kZ: [lo, hi]; bounded false: no upper bound can be given.
struct EstimateRange {
  double lo = 0, hi = 0;
  bool bounded = true;
};

class EstimateTracker {
 public:
  // A window whose traps took this share of a CPU or more bounds nothing: 1 / (1 - s) explodes.
  static constexpr double kMaxBoundedShare = 0.9;
  // period_ns: the probe's window period (window length / coverage).
  EstimateTracker(EstimatePolicy policy, int64_t now_ns, int64_t period_ns);
  EstimateMode mode() const { return mode_; }
  // Why the probe is in its mode, in a few words (the summary and /metrics say it).
  const std::string& reason() const { return reason_; }

  // Sampling calls: since the last tick, `kept` events kept at rate p, `own_traps` calls
  // of this probe trapped, and the busiest CPU's share of time spent in traps (all probes).
  // may_window false: calls are sampled whatever this says (windows not allowed for the
  // probe now), so only the counts move. Returns true when the mode changed.
  bool on_calls_tick(int64_t now_ns, uint64_t kept, double p, uint64_t own_traps, double trap_share,
                     double trap_cost_ns, bool may_window = true);
  // Calls are sampled from now on for a reason of the caller's (windows not allowed): the
  // mode follows, unless the estimate is already gone.
  void sample_calls(int64_t now_ns, std::string reason);
  // Windows: one window closed, in which `kept` events were kept at overall rate p (the kernel
  // kept p / f of its calls) and traps took `trap_share` of the busiest CPU's time.
  // Returns true when the mode changed.
  bool on_window(int64_t now_ns, uint64_t kept, double p, double trap_share);
  // The period changed (a rate change).
  void set_period(int64_t period_ns) { period_ns_ = period_ns; }

  // False once nothing can bound the count (mode kUnestimable, or a window ran at the trap's
  // pace): no number is printed then.
  bool estimable() const { return mode_ != EstimateMode::kUnestimable && !unbounded_; }
  // The range of `estimate` (the probe's EST_COUNT, which may correct the raw weights
  // for quota drops and ring loss: the range scales with it). An unestimable probe has none.
  EstimateRange range(double estimate) const;
  // Raw sums, for tests and the summary.
  double calls_estimate() const { return calls_sum_; }
  double windows_estimate() const { return windows_sum_; }
  uint64_t windows() const { return windows_; }
  double last_trap_share() const { return last_share_; }

 private:
  void enter(EstimateMode m, int64_t now_ns, std::string reason);
  EstimatePolicy policy_;
  EstimateMode mode_ = EstimateMode::kCalls;
  std::string reason_;
  int64_t period_ns_;
  int64_t phase_start_ns_;
  double last_share_ = 0;
  double spent_ns_ = 0;  // trap time spent sampling calls
  // Call sampling: sum of weights and its Poisson variance (kept / p^2).
  double calls_sum_ = 0, calls_pois_var_ = 0;
  uint64_t calls_kept_ = 0;
  // Windows: per-window estimates X_i (kept / p), their sum, successive squared differences,
  // the Poisson floor (kept / p^2) and the trap bias bound sum X_i s_i / (1 - s_i).
  uint64_t windows_ = 0, windows_kept_ = 0;
  double windows_sum_ = 0, last_x_ = 0, sq_diffs_ = 0, poisson_var_ = 0, bias_ = 0;
  int high_share_windows_ = 0;  // consecutive windows over max_trap_share
  uint64_t ticks_ = 0;          // calls ticks seen
  double last_p_ = 0;
  bool unbounded_ = false;      // a window's traps left no bound on what it missed
};

// Student's t quantile for a two-sided 99.9% interval with `df` degrees of freedom.
double t999(uint64_t df);

}  // namespace mcp::loader
