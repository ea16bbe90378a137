#include "control/estimate_corrector.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using mcp::control::EstimateCorrector;

TEST(EstimateCorrector, ScalesEachIntervalsWeightsBySampledInOverDelivered) {
  EstimateCorrector c;
  // Interval 1: 100 sampled in at p = 0.5, the quota let 10 through: 10 delivered, weight 2.
  for (int i = 0; i < 10; i++) c.on_delivered(1, 2.0);
  c.close_interval(1, /*kept=*/10, /*quota_dropped=*/90);
  EXPECT_DOUBLE_EQ(c.estimate(1), 200.0);
  // Interval 2: 50 kept, 30 of them lost in the ring: 20 delivered.
  for (int i = 0; i < 20; i++) c.on_delivered(1, 2.0);
  c.close_interval(1, 60, 90);
  EXPECT_DOUBLE_EQ(c.estimate(1), 300.0);
}

TEST(EstimateCorrector, CarriesAnIntervalWithNothingDeliveredIntoTheNext) {
  EstimateCorrector c;
  c.close_interval(7, 40, 0);  // all 40 lost
  EXPECT_EQ(c.estimate(7), 0.0);
  EXPECT_EQ(c.uncovered(7), 40u);
  for (int i = 0; i < 10; i++) c.on_delivered(7, 1.0);
  c.close_interval(7, 50, 0);
  EXPECT_DOUBLE_EQ(c.estimate(7), 50.0);
  EXPECT_EQ(c.uncovered(7), 0u);
}

TEST(EstimateCorrector, LateRecordsBalanceAcrossIntervals) {
  EstimateCorrector c;
  for (int i = 0; i < 90; i++) c.on_delivered(2, 1.0);  // 10 still in the ring at the close
  c.close_interval(2, 100, 0);
  for (int i = 0; i < 110; i++) c.on_delivered(2, 1.0);
  c.close_interval(2, 200, 0);
  EXPECT_DOUBLE_EQ(c.estimate(2), 200.0);
}

TEST(EstimateCorrector, RestoresTheTrueCountUnderRandomQuotaAndLoss) {
  std::mt19937_64 rng(11);
  std::bernoulli_distribution sampled(0.25), quota(0.2), lost(0.3);
  EstimateCorrector c;
  uint64_t calls = 0, kept = 0, dropped = 0;
  for (int interval = 0; interval < 50; interval++) {
    for (int i = 0; i < 20000; i++) {
      calls++;
      if (!sampled(rng)) continue;
      if (!quota(rng)) {
        dropped++;
        continue;
      }
      kept++;
      if (!lost(rng)) c.on_delivered(3, 4.0);
    }
    c.close_interval(3, kept, dropped);
  }
  EXPECT_NEAR(c.estimate(3), static_cast<double>(calls), 0.02 * static_cast<double>(calls));
}

}  // namespace
