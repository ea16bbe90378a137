#include "control/rate_controller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "common/error.h"
#include "common/event.h"
#include "workload_sim.h"

namespace mcp::control {
namespace {

using testing::SimResult;
using testing::WorkloadSim;

constexpr double kTarget = 2000.0;

struct Harness {
  explicit Harness(uint64_t seed, RateControllerConfig config = {}) {
    config.target_qps = config.target_qps > 0 ? config.target_qps : kTarget;
    controller = std::make_unique<RateController>(
        config, [this](uint32_t id, uint64_t threshold) {
          ++callbacks;
          if (sim) sim->on_threshold(id, threshold);
        });
    sim = std::make_unique<WorkloadSim>(*controller, 7, seed);
    controller->add_probe(7);
  }
  std::unique_ptr<RateController> controller;
  std::unique_ptr<WorkloadSim> sim;
  int callbacks = 0;
};

std::string describe(const SimResult& r) {
  std::string s;
  for (std::size_t i = 0; i < r.kept_per_second.size(); ++i) {
    s += std::to_string(i) + ":" + std::to_string(static_cast<int>(r.kept_per_second[i])) + "@" +
         std::to_string(r.rate_at_second[i]) + " ";
  }
  return s;
}

void expect_within(const SimResult& r, std::size_t from_second, std::size_t to_second,
                   double tolerance) {
  ASSERT_LE(to_second, r.kept_per_second.size());
  for (std::size_t i = from_second; i < to_second; ++i) {
    EXPECT_NEAR(r.kept_per_second[i], kTarget, kTarget * tolerance)
        << "second " << i << "; trace " << describe(r);
  }
}

TEST(RateController, KeptRateWithinTenPercentOfTargetAfterThreeSeconds) {
  for (uint64_t seed : {1, 2, 3}) {
    Harness h(seed);
    const SimResult r = h.sim->run(10, [](double) { return 50'000.0; });
    expect_within(r, 3, 10, 0.10);
    EXPECT_NEAR(h.controller->stats(7)->rate, kTarget / 50'000.0, 0.004);
  }
}

TEST(RateController, RecoversWithinTwoSecondsAfterOfferedStepsUpAndDown) {
  const bool verbose = std::getenv("MCP_CONTROL_TRACE") != nullptr;
  for (uint64_t seed : {11, 12, 13}) {
    Harness h(seed);
    // 50k/s for 5 s, 200k/s for 5 s, 5k/s for 5 s.
    const SimResult r = h.sim->run(15, [](double t) {
      const double since = t - 1.0;  // the sim clock starts at 1 s
      return since < 5 ? 50'000.0 : since < 10 ? 200'000.0 : 5'000.0;
    });
    if (verbose) std::printf("seed %llu: %s\n", static_cast<unsigned long long>(seed), describe(r).c_str());
    expect_within(r, 3, 5, 0.10);
    expect_within(r, 7, 10, 0.10);   // step up at 5 s: second 5 and 6 may deviate
    expect_within(r, 12, 15, 0.10);  // step down at 10 s
  }
}

TEST(RateController, LateTicksDoNotDisturbTracking) {
  Harness h(61);
  const SimResult r = h.sim->run(10, [](double) { return 80'000.0; }, 0, /*skip_update_every=*/3);
  expect_within(r, 3, 10, 0.10);
}

TEST(RateController, SaturatesAtMaxRateWhenOfferedBelowTargetWithoutWindup) {
  Harness h(21);
  const SimResult quiet = h.sim->run(10, [](double) { return 1'000.0; });
  // Below the target everything is kept: p pinned at exactly 1, threshold "keep all".
  EXPECT_EQ(h.sim->threshold(), UINT64_MAX);
  EXPECT_EQ(h.controller->stats(7)->rate, 1.0);
  // Ten seconds of a positive error must not have charged the integrator: after the rise the
  // kept rate is on target within 2 s, as it would be from a cold start.
  const SimResult busy = h.sim->run(6, [](double) { return 100'000.0; });
  expect_within(busy, 2, 6, 0.10);
  EXPECT_NEAR(quiet.kept_per_second[9], 1000, 150);
}

TEST(RateController, LostEventsPushTheRateDownBelowWhatTheTargetAsks) {
  Harness h(31);
  h.sim->run(5, [](double) { return 50'000.0; });
  const double before = h.controller->stats(7)->rate;
  // The ring holds only 100 kept events per tick (1000/s), half what the target asks.
  h.sim->run(3, [](double) { return 50'000.0; }, /*ring_capacity_per_tick=*/100);
  const auto during = *h.controller->stats(7);
  EXPECT_LT(during.rate, before * 0.75);
  EXPECT_LT(during.ceiling, before);
  EXPECT_GT(during.lost_qps, 0.0);
  // Losses stop: the ceiling grows back and the kept rate returns to target.
  const SimResult after = h.sim->run(6, [](double) { return 50'000.0; });
  expect_within(after, 3, 6, 0.10);
}

TEST(RateController, ReportsThresholdOnlyWhenRateMovesMeaningfully) {
  Harness h(41);
  EXPECT_EQ(h.callbacks, 1);  // initial threshold at add_probe
  h.sim->run(10, [](double) { return 50'000.0; });
  const int after_settling = h.callbacks;
  h.sim->run(10, [](double) { return 50'000.0; });
  // Steady state: the PID only nudges p within noise; far fewer than one report per tick.
  EXPECT_LT(h.callbacks - after_settling, 40);
  EXPECT_EQ(h.sim->threshold(), h.controller->stats(7)->threshold);
  EXPECT_EQ(h.controller->stats(7)->threshold,
            probability_to_threshold(h.controller->stats(7)->rate));
}

TEST(RateController, ExposesOfferedAndKeptRatesForMetrics) {
  Harness h(51);
  h.sim->run(5, [](double) { return 50'000.0; });
  const auto s = *h.controller->stats(7);
  EXPECT_NEAR(s.offered_qps, 50'000, 2'500);
  EXPECT_NEAR(s.seen_qps, 50'000, 2'500);
  EXPECT_NEAR(s.kept_qps, kTarget, kTarget * 0.1);
  EXPECT_EQ(s.lost_qps, 0.0);
  EXPECT_EQ(s.target_qps, kTarget);
}

TEST(RateController, QuotaDroppedEventsAreNotCountedAsOffered) {
  RateControllerConfig config;
  config.target_qps = 100;
  std::map<uint32_t, uint64_t> thresholds;
  RateController c(config, [&](uint32_t id, uint64_t t) { thresholds[id] = t; });
  ProbeCounters counters;
  uint64_t now = 0;
  c.add_probe(3);
  for (int i = 0; i < 30; ++i) {
    counters.seen += 1000;          // 10k/s hits
    counters.quota_dropped += 900;  // 9k/s of them over quota
    // The kernel keeps p of what passes the quota.
    counters.kept += static_cast<uint64_t>(std::llround(100 * threshold_to_probability(thresholds[3])));
    now += 100'000'000;
    c.update(3, now, counters);
  }
  const auto s = *c.stats(3);
  EXPECT_NEAR(s.offered_qps, 1000, 1);
  EXPECT_NEAR(s.seen_qps, 10000, 1);
  // Feed-forward from the offered 1k/s, not the 10k/s seen: p about 0.1, kept on target.
  EXPECT_NEAR(s.rate, 0.1, 0.01);
  EXPECT_NEAR(s.kept_qps, 100, 10);
}

TEST(RateController, ManagesProbesIndependently) {
  RateControllerConfig config;
  config.target_qps = 1000;
  std::map<uint32_t, uint64_t> thresholds;
  RateController c(config, [&](uint32_t id, uint64_t t) { thresholds[id] = t; });
  c.add_probe(1);
  c.add_probe(2, 50.0);
  c.add_probe(3, 0.0);  // passive
  std::map<uint32_t, ProbeCounters> counters;
  uint64_t now = 0;
  for (int i = 0; i < 50; ++i) {
    now += 100'000'000;
    for (uint32_t id : {1u, 2u, 3u}) {
      const double p = threshold_to_probability(thresholds[id]);
      counters[id].seen += 2000;  // 20k/s each
      counters[id].kept += static_cast<uint64_t>(std::llround(2000 * p));
    }
    c.tick(now, std::vector<ProbeSample>{{1, counters[1]}, {2, counters[2]}, {3, counters[3]}});
  }
  EXPECT_NEAR(c.stats(1)->rate, 1000.0 / 20000, 0.005);
  EXPECT_NEAR(c.stats(2)->rate, 50.0 / 20000, 0.0005);
  EXPECT_EQ(c.stats(3)->rate, 1.0);
  EXPECT_EQ(thresholds[3], UINT64_MAX);
  ASSERT_EQ(c.all_stats().size(), 3u);
  EXPECT_EQ(c.all_stats()[1].probe_id, 2u);
  c.remove_probe(2);
  EXPECT_FALSE(c.stats(2).has_value());
  EXPECT_EQ(c.size(), 2u);
}

TEST(RateController, SurvivesCounterResetWithoutRateSpike) {
  RateControllerConfig config;
  config.target_qps = 1000;
  uint64_t threshold = UINT64_MAX;
  RateController c(config, [&](uint32_t, uint64_t t) { threshold = t; });
  ProbeCounters counters;
  uint64_t now = 0;
  for (int i = 0; i < 40; ++i) {
    if (i == 20) counters = {};  // probe re-attached, maps recreated
    now += 100'000'000;
    counters.seen += 1000;
    counters.kept += static_cast<uint64_t>(std::llround(1000 * threshold_to_probability(threshold)));
    c.update(9, now, counters);
    if (i > 20) EXPECT_NEAR(c.stats(9)->seen_qps, 10'000, 1'500) << "tick " << i;
  }
  EXPECT_NEAR(c.stats(9)->rate, 0.1, 0.01);
}

TEST(RateController, RejectsInconsistentConfig) {
  RateControllerConfig config;
  config.min_rate = 0.0;
  EXPECT_THROW(RateController(config, nullptr), mcp::Error);
  config.min_rate = 0.5;
  config.max_rate = 0.1;
  EXPECT_THROW(RateController(config, nullptr), mcp::Error);
}

}  // namespace
}  // namespace mcp::control
