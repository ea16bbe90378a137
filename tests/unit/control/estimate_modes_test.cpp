// Estimate modes (loader/estimate_modes.h): when time windows may count a probe, and whether
// the range printed holds the truth, against simulated workloads with known counts.
#include "loader/estimate_modes.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using mcp::loader::EstimateMode;
using mcp::loader::EstimatePolicy;
using mcp::loader::EstimateTracker;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kPeriod = 200 * kMs;  // 2 ms windows at coverage 0.01

// A probe whose traps take 2% of a CPU samples calls for its probation (200 ms, and two
// periods: 400 ms here), then windows.
TEST(EstimateModes, CallsFirstThenWindowsOnceTheProbationEnds) {
  EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
  EXPECT_EQ(t.mode(), EstimateMode::kCalls);
  for (int64_t now = 100 * kMs; now < 400 * kMs; now += 100 * kMs)
    EXPECT_FALSE(t.on_calls_tick(now, 10, 0.01, 1000, 0.02, 20000)) << now;
  EXPECT_EQ(t.mode(), EstimateMode::kCalls);
  EXPECT_TRUE(t.on_calls_tick(400 * kMs, 10, 0.01, 1000, 0.02, 20000));
  EXPECT_EQ(t.mode(), EstimateMode::kWindows);
  EXPECT_NE(t.reason().find("2.0%"), std::string::npos) << t.reason();
}

// A call-bound loop (traps take the whole CPU) is sampled call by call while the budget
// lasts (a short program is counted exactly), then gets no estimate rather than a wrong one.
TEST(EstimateModes, ATrapBoundLoopSamplesCallsUntilTheBudgetThenHasNoEstimate) {
  EstimatePolicy policy;
  policy.calls_budget = std::chrono::seconds(1);
  EstimateTracker t(policy, 0, kPeriod);
  int64_t now = 0;
  // 5,000 calls a tick at 20 us a trap: 100 ms of traps a tick, 1 s of budget in 10 ticks.
  for (int i = 0; i < 9; i++) EXPECT_FALSE(t.on_calls_tick(now += 100 * kMs, 50, 0.01, 5000, 1.0, 20000));
  EXPECT_EQ(t.mode(), EstimateMode::kCalls);
  EXPECT_TRUE(t.range(4500).bounded);
  EXPECT_TRUE(t.on_calls_tick(now += 100 * kMs, 50, 0.01, 5000, 1.0, 20000));
  EXPECT_EQ(t.mode(), EstimateMode::kUnestimable);
  EXPECT_FALSE(t.range(50000).bounded);
}

// One quiet tick of a busy loop does not open windows: the share is smoothed.
TEST(EstimateModes, OneQuietTickDoesNotOpenWindows) {
  EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
  int64_t now = 0;
  for (int i = 0; i < 12; i++) t.on_calls_tick(now += 100 * kMs, 5, 0.01, 500, 0.8, 20000);
  ASSERT_EQ(t.mode(), EstimateMode::kCalls);
  EXPECT_FALSE(t.on_calls_tick(now += 100 * kMs, 0, 0.01, 0, 0.0, 20000));
  EXPECT_EQ(t.mode(), EstimateMode::kCalls);
}

// Call sampling's range (99.9%) holds the true count, also where few calls are kept.
TEST(EstimateModes, CallSamplingRangeHoldsTheTruth) {
  std::mt19937_64 rng(3);
  const double p = 0.01;
  for (uint64_t calls : {1000u, 20000u}) {  // ~10 and ~200 kept
    int held = 0, runs = 1000;
    for (int r = 0; r < runs; r++) {
      EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
      std::binomial_distribution<uint64_t> draw(calls / 10, p);
      double est = 0;
      for (int i = 1; i <= 10; i++) {
        const uint64_t kept = draw(rng);
        est += static_cast<double>(kept) / p;
        t.on_calls_tick(i * 10 * kMs, kept, p, calls / 10, 0.5, 20000);
      }
      const auto range = t.range(est);
      held += range.lo <= calls && calls <= range.hi;
    }
    EXPECT_GE(held, runs * 99 / 100) << calls << " calls: " << held << " of " << runs;
  }
}

// Windows over a steady workload with random arrivals: the range (successive differences,
// Student's t) holds the truth (99.9%), also when only a few windows ran.
TEST(EstimateModes, WindowsRangeHoldsTheTruthOfASteadyWorkload) {
  std::mt19937_64 rng(5);
  const double p = 0.01;  // coverage 0.01, in-window rate 1: a window keeps all its calls
  for (int windows : {3, 8, 40}) {
    int held = 0, runs = 400;
    for (int r = 0; r < runs; r++) {
      EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
      for (int i = 1; i <= 12; i++) t.on_calls_tick(i * 100 * kMs, 0, p, 0, 0.001, 20000);  // probation, no calls
      ASSERT_EQ(t.mode(), EstimateMode::kWindows);
      // 2,000 calls/s: a 200 ms period holds 400, its 2 ms window about 4.
      std::poisson_distribution<uint64_t> in_window(4.0);
      double est = 0;
      for (int i = 0; i < windows; i++) {
        const uint64_t kept = in_window(rng);
        est += static_cast<double>(kept) / p;
        t.on_window(0, kept, p, 0.01);
      }
      const double truth = 400.0 * windows;
      const auto range = t.range(est);
      ASSERT_TRUE(range.bounded);
      held += range.lo <= truth && truth <= range.hi;
    }
    EXPECT_GE(held, runs * 99 / 100) << windows << " windows: " << held << " of " << runs;
  }
}

// A window in which traps took a share s of the CPU may have seen as little as (1 - s) of
// the calls made untraced: the range's top reaches the corrected count.
TEST(EstimateModes, TrapShareWidensTheRangeToTheUntracedCount) {
  EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
  for (int i = 1; i <= 12; i++) t.on_calls_tick(i * 100 * kMs, 0, 0.01, 0, 0.05, 20000);
  ASSERT_EQ(t.mode(), EstimateMode::kWindows);
  // A call-bound workload at share 0.08: it made 100 calls a window untraced, 92 traced.
  double est = 0;
  for (int i = 0; i < 50; i++) {
    t.on_window(0, 92, 0.01, 0.08);
    est += 9200;
  }
  const auto range = t.range(est);
  EXPECT_GE(range.hi, 50 * 10000.0);
  EXPECT_EQ(t.mode(), EstimateMode::kWindows);
}

// Windows whose traps take more than the policy allows go back to sampling calls; one that
// ran at the trap's pace leaves nothing to bound: no estimate.
TEST(EstimateModes, BusyWindowsGoBackToCallsAndATrapBoundWindowEndsTheEstimate) {
  EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
  for (int i = 1; i <= 12; i++) t.on_calls_tick(i * 100 * kMs, 0, 0.01, 0, 0.05, 20000);
  ASSERT_EQ(t.mode(), EstimateMode::kWindows);
  EXPECT_FALSE(t.on_window(0, 10, 0.01, 0.3));
  EXPECT_FALSE(t.on_window(0, 10, 0.01, 0.3));
  EXPECT_TRUE(t.on_window(0, 10, 0.01, 0.3));
  EXPECT_EQ(t.mode(), EstimateMode::kCalls);
  EXPECT_TRUE(t.range(3000).bounded);
  EXPECT_TRUE(t.on_window(0, 10, 0.01, 0.95));
  EXPECT_EQ(t.mode(), EstimateMode::kUnestimable);
  EXPECT_FALSE(t.range(4000).bounded);
}

// Nothing kept: a Poisson bound (z^2 / p: 1,083 at rate 0.01), never "0 +- 0".
TEST(EstimateModes, NothingKeptStillBoundsWhatWasMissed) {
  EstimateTracker t(EstimatePolicy{}, 0, kPeriod);
  t.on_calls_tick(100 * kMs, 0, 0.01, 0, 0.0, 20000);
  const auto r = t.range(0);
  EXPECT_TRUE(r.bounded);
  EXPECT_NEAR(r.hi, mcp::loader::kZ * mcp::loader::kZ / 0.01, 1);
}

TEST(EstimateModes, StudentQuantiles) {
  EXPECT_NEAR(mcp::loader::t999(1), 636.6, 0.1);
  EXPECT_NEAR(mcp::loader::t999(10), 4.587, 1e-3);
  EXPECT_NEAR(mcp::loader::t999(100), 3.390, 0.01);
}

}  // namespace
