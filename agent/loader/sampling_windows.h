// Sampling windows: a uprobe's cost is the breakpoint trap every call takes, whatever the
// kernel then decides, so a probe sampled at rate p is attached only in short windows
// covering a fraction f of the time, and the kernel keeps p / f of the calls inside them.
// Time is cut into periods of W / f; each period holds W of window at a uniformly random
// offset (wrapping around within its own period), so every instant is covered with
// probability exactly f whatever the workload does: a kept call's weight 1 / (f * p / f) =
// 1 / p is its true inclusion probability, estimates stay unbiased. Each period covers
// exactly W, so a steady workload's estimate is off by at most about one window's calls;
// calls in one window are kept or missed together, which a bursty workload feels.
// The toggler (BpfSession) acts late: an attach takes time, and one thread serves every
// probe. A late window is shifted, never shortened or skipped: it counts for its full length
// from when its breakpoints are in place (the shift does not depend on the workload, so the
// offset stays uniform). A late close does not lengthen it: the kernel keeps nothing past the
// window's scheduled end (mcp_probe_config.window_end_ns), however long the breakpoints stay.
// Whether windows can estimate a probe at all is loader/estimate_modes.h's question.
// This header is the arithmetic and the schedule; BpfSession attaches and detaches.
#pragma once
#include <chrono>
#include <cstdint>
#include <random>

namespace mcp::loader {

// Rates at or above this are always attached: windows would save less than they cost in
// attach/detach work and variance.
inline constexpr double kWindowMaxRate = 0.5;
// The smallest coverage: below it the windows of a short run would be too few to estimate
// from, so the rest of the reduction is the in-window draw.
inline constexpr double kWindowMinFraction = 0.01;
// How long each window stays attached (docs/performance.md, "Sampling windows": attaching and
// detaching one probe costs the agent ~0.1-0.3 ms here). At f = 0.01 a period is 200 ms: a
// 5 s run has 25 windows.
inline constexpr std::chrono::microseconds kWindowLength{2000};

struct WindowPlan {
  double fraction = 1;  // f: share of time attached (1: always)
  double inner = 1;     // p / f: the in-window keep probability the kernel applies
};
WindowPlan plan_windows(double rate);

// The on/off schedule of one probe, in nanoseconds of a steady clock.
class WindowSchedule {
 public:
  // Windows that ended before `now_ns` are not owed; one in progress is owed from now on.
  WindowSchedule(double fraction, std::chrono::nanoseconds window, uint64_t seed, int64_t now_ns);
  double fraction() const { return fraction_; }
  // What the toggler should do at `now_ns`, the window being open or not, and when to ask
  // again (> now_ns unless an action is due now).
  struct Decision {
    bool open;
    int64_t wake_ns;
  };
  Decision at(int64_t now_ns, bool is_open);
  // The window asked for is open (its breakpoints in place) since `opened_ns`: it counts for
  // its full length from then.
  void opened(int64_t opened_ns);
  // The open window's close started (the kernel stopped counting at close_at() already).
  void closed();
  // While open: when the window that is open stops counting (0: none open).
  int64_t close_at() const { return close_at_; }

 private:
  struct Piece {
    int64_t start_ns, length_ns;
  };
  // The next window (or wrapped part of one) after the last one handed out.
  Piece next_piece();
  void plan_period(int64_t start_ns);
  double fraction_;
  int64_t window_ns_, period_ns_;
  std::mt19937_64 rng_;
  int64_t period_start_ = 0;
  // This period's windows as offsets in it: [a0, b0) and, wrapped, [0, b1) (empty: b1 == 0);
  // `handed_` of them given out already (the wrapped part comes first).
  int64_t a0_ = 0, b0_ = 0, b1_ = 0;
  int handed_ = 0;
  Piece pending_{};        // the window owed next
  int64_t close_at_ = 0;   // while open: when the window that is open ends
};

// What a probe's windows did, for summaries and metrics.
struct WindowStats {
  double fraction = 1;       // the nominal coverage now (1: always attached)
  uint64_t windows = 0;      // windows opened
  uint64_t covered_ns = 0;   // time counted (from each attach's completion to the window's end)
  uint64_t elapsed_ns = 0;   // time since windowing started
  uint64_t attach_ns = 0;    // time spent attaching and detaching, summed
  // The measured share of time attached (compare with `fraction`).
  double covered() const {
    return elapsed_ns ? static_cast<double>(covered_ns) / static_cast<double>(elapsed_ns) : 0.0;
  }
};

}  // namespace mcp::loader
