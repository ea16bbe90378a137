// The sampling windows' arithmetic and schedule (loader/sampling_windows.h), without a kernel.
#include "loader/sampling_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace {

using mcp::loader::plan_windows;
using mcp::loader::WindowSchedule;

TEST(WindowPlan, LowRatesAreTimeHighRatesAreCallsAndTheProductIsTheRate) {
  EXPECT_EQ(plan_windows(1).fraction, 1);
  EXPECT_EQ(plan_windows(0.5).fraction, 1);  // kWindowMaxRate: always attached
  EXPECT_DOUBLE_EQ(plan_windows(0.5).inner, 0.5);
  EXPECT_DOUBLE_EQ(plan_windows(0.05).fraction, 0.05);
  EXPECT_DOUBLE_EQ(plan_windows(0.05).inner, 1);
  // Below the smallest coverage the in-window draw does the rest.
  EXPECT_DOUBLE_EQ(plan_windows(0.001).fraction, 0.01);
  EXPECT_DOUBLE_EQ(plan_windows(0.001).inner, 0.1);
  for (double p : {0.3, 0.05, 0.01, 0.002})
    EXPECT_NEAR(plan_windows(p).fraction * plan_windows(p).inner, p, 1e-12) << p;
}

// A toggler that opens `open_delay` after a window falls due (an attach's time, a busy thread)
// and starts a close `close_late` after it falls due (a late wake-up): returns the time
// counted (from each open's completion to the window's end, where the kernel stops keeping)
// over [start, end).
int64_t time_open(WindowSchedule& s, int64_t start, int64_t end, int64_t open_delay, int64_t close_late = 0) {
  int64_t t = start, on = 0, opened = 0;
  bool open = false;
  while (t < end) {
    const auto d = s.at(t, open);
    if (d.open == open) {
      EXPECT_GT(d.wake_ns, t);
      t = d.wake_ns;
      continue;
    }
    if (d.open) {
      t += open_delay;
      s.opened(t);
      opened = t;
    } else {
      t += close_late;
      on += std::min(t, s.close_at()) - opened;
      s.closed();
    }
    open = d.open;
  }
  if (open) on += std::min(end, s.close_at()) - opened;
  return on;
}

// Time on over a long run is f of it, period after period (each holds exactly one window).
TEST(WindowSchedule, EachPeriodCoversExactlyOneWindow) {
  const int64_t w = 2'000'000, start = 1'000'000'000;
  WindowSchedule s(0.05, std::chrono::nanoseconds(w), 7, start);
  const int64_t end = start + 100 * 40'000'000LL;  // 100 periods of 40 ms
  EXPECT_NEAR(static_cast<double>(time_open(s, start, end, 0)), 0.05 * static_cast<double>(end - start),
              static_cast<double>(2 * w));
}

// A toggler that is late to open (by most of a window, or by more than one) shifts windows; it
// neither shortens nor skips them. One late to close does not lengthen them: the kernel stops
// keeping at the window's end. Either way the time counted is still f of the run. (Windows shortened by a late
// open covered 0.75 of f in a large process on a GPU host; late closes 1.09 of f here.)
TEST(WindowSchedule, ALateTogglerStillCountsEveryWindowInFull) {
  const int64_t w = 2'000'000, start = 1'000'000'000;
  const int64_t end = start + 200 * 40'000'000LL;
  for (auto [open_delay, close_late] : {std::pair<int64_t, int64_t>{700'000, 0}, {2'500'000, 0}, {300'000, 200'000},
                                        {0, 900'000}}) {
    WindowSchedule s(0.05, std::chrono::nanoseconds(w), 11, start);
    EXPECT_NEAR(static_cast<double>(time_open(s, start, end, open_delay, close_late)),
                0.05 * static_cast<double>(end - start), static_cast<double>(2 * w + open_delay + close_late))
        << "open delay " << open_delay << ", close late " << close_late;
  }
}

// Every instant is covered with probability f, whatever the seed (the schedule's phase): the
// share of seeds covering a fixed instant is f.
TEST(WindowSchedule, AFixedInstantIsCoveredWithProbabilityF) {
  const int64_t instant = 5'000'000'123;
  int covered = 0;
  const int n = 20000;
  for (int seed = 0; seed < n; seed++) {
    WindowSchedule s(0.1, std::chrono::nanoseconds(2'000'000), static_cast<uint64_t>(seed), 1'000'000'000);
    // An on-time toggler: open from each window's start until its end.
    int64_t t = 1'000'000'000;
    bool open = false;
    for (;;) {
      const auto d = s.at(t, open);
      if (d.open != open) {
        if (d.open) s.opened(t);
        open = d.open;
        continue;
      }
      if (d.wake_ns > instant) break;
      t = d.wake_ns;
    }
    covered += open;
  }
  // Binomial(20000, 0.1): sd 42; 5 sd.
  EXPECT_NEAR(covered, 0.1 * n, 5 * 42.5);
}

}  // namespace
