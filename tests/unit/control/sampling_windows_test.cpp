// The sampling windows' arithmetic and schedule (loader/sampling_windows.h), without a kernel.
#include "loader/sampling_windows.h"

#include <gtest/gtest.h>

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

// Time on over a long run is f of it, period after period (each holds exactly one window).
TEST(WindowSchedule, EachPeriodCoversExactlyOneWindow) {
  const int64_t w = 2'000'000, start = 1'000'000'000;
  WindowSchedule s(0.05, std::chrono::nanoseconds(w), 7, start);
  int64_t t = start, on = 0;
  const int64_t end = start + 100 * 40'000'000LL;  // 100 periods of 40 ms
  while (t < end) {
    const auto st = s.at(t);
    ASSERT_GT(st.until_ns, t);
    const int64_t next = std::min(st.until_ns, end);
    if (st.on) on += next - t;
    t = next;
  }
  EXPECT_NEAR(static_cast<double>(on), 0.05 * static_cast<double>(end - start), static_cast<double>(2 * w));
}

// Every instant is covered with probability f, whatever the seed (the schedule's phase): the
// share of seeds covering a fixed instant is f.
TEST(WindowSchedule, AFixedInstantIsCoveredWithProbabilityF) {
  const int64_t instant = 5'000'000'123;
  int covered = 0;
  const int n = 20000;
  for (int seed = 0; seed < n; seed++) {
    WindowSchedule s(0.1, std::chrono::nanoseconds(2'000'000), static_cast<uint64_t>(seed), 1'000'000'000);
    covered += s.at(instant).on;
  }
  // Binomial(20000, 0.1): sd 42; 5 sd.
  EXPECT_NEAR(covered, 0.1 * n, 5 * 42.5);
}

}  // namespace
