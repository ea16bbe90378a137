#include "clock/drift_calibrator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "clock/clock_source.h"

namespace mcp::clock {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kSecond = 1'000'000'000;

// A simulated clock and a calibrator ticked at the interval the calibrator asks for.
struct Rig {
  explicit Rig(SimulatedClockOptions sim_options, CalibratorOptions options = {})
      : sim(sim_options), calibrator(sim, options) {}

  // Ticks for `seconds` of simulated time; calls `each` after every tick.
  template <typename F>
  void run_for(double seconds, F&& each) {
    const int64_t end = sim.now_monotonic_ns() + static_cast<int64_t>(seconds * kSecond);
    while (sim.now_monotonic_ns() < end) {
      const auto delay = calibrator.tick();
      each();
      sim.advance(delay.count());
    }
  }
  void run_for(double seconds) {
    run_for(seconds, [] {});
  }

  // Calibrated minus true wall time right now.
  int64_t mapping_error_ns() const {
    const int64_t mono = sim.now_monotonic_ns();
    return static_cast<int64_t>(calibrator.to_wall_ns(static_cast<uint64_t>(mono))) -
           sim.true_realtime_at(mono);
  }

  SimulatedClockSource sim;
  DriftCalibrator calibrator;
};

SimulatedClockOptions drifting(double ppm, double jitter_ns = 2000.0, uint64_t seed = 1) {
  SimulatedClockOptions o;
  o.drift_ppm = ppm;
  o.jitter_ns = jitter_ns;
  o.seed = seed;
  return o;
}

TEST(DriftCalibrator, EstimatesKnownDriftWithinHalfPpmUnderTwoMicrosecondJitter) {
  for (const double ppm : {37.0, -12.5, 0.0}) {
    SCOPED_TRACE(ppm);
    Rig rig(drifting(ppm));
    rig.run_for(120);
    const auto s = rig.calibrator.stats();
    EXPECT_NEAR(s.drift_ppm, ppm, 0.5);
    EXPECT_EQ(s.quality, ClockQuality::kGood);
    EXPECT_EQ(s.steps, 0u);
    EXPECT_NEAR(s.residual_ns, 2000.0, 500.0);  // the fit sees the jitter, not a model error
    EXPECT_LT(std::abs(rig.mapping_error_ns()), 2000);
    EXPECT_EQ(s.recommended_interval, milliseconds(500));
  }
}

TEST(DriftCalibrator, WarmsUpFastThenSettlesToTheNormalInterval) {
  Rig rig(drifting(37.0));
  EXPECT_FALSE(rig.calibrator.has_mapping());
  EXPECT_EQ(rig.calibrator.to_wall_ns(42), 42u);  // identity until the first sample
  rig.calibrator.tick();
  EXPECT_TRUE(rig.calibrator.has_mapping());
  EXPECT_LT(std::abs(rig.mapping_error_ns()), 20'000);
  EXPECT_EQ(rig.calibrator.stats().quality, ClockQuality::kWarmingUp);
  EXPECT_EQ(rig.calibrator.recommended_interval(), milliseconds(100));
  for (std::size_t i = 1; i < rig.calibrator.options().min_points; ++i) {
    rig.sim.advance(rig.calibrator.recommended_interval().count());
    rig.calibrator.tick();
  }
  EXPECT_EQ(rig.calibrator.stats().quality, ClockQuality::kGood);
  EXPECT_EQ(rig.calibrator.recommended_interval(), milliseconds(500));
}

TEST(DriftCalibrator, SlidingWindowStaysBoundedAndAnHourOfJitterRaisesNoFalseAlarm) {
  Rig rig(drifting(37.0, 2000.0, 11));
  rig.run_for(2);  // past warm-up
  int bad_quality = 0;
  rig.run_for(3600, [&] {
    if (rig.calibrator.stats().quality != ClockQuality::kGood) ++bad_quality;
  });
  const auto s = rig.calibrator.stats();
  EXPECT_EQ(bad_quality, 0);
  EXPECT_EQ(s.steps, 0u);
  EXPECT_EQ(s.points, 2048u);
  EXPECT_NEAR(s.drift_ppm, 37.0, 0.5);
  EXPECT_LT(std::abs(rig.mapping_error_ns()), 2000);
}

TEST(DriftCalibrator, DetectsAStepWithinOneSampleAndReanchorsWithoutBendingTheFit) {
  Rig rig(drifting(37.0));
  rig.run_for(60);
  ASSERT_EQ(rig.calibrator.stats().steps, 0u);

  for (const int64_t step : {int64_t{250'000'000}, int64_t{-3} * kSecond, int64_t{2'000'000}}) {
    SCOPED_TRACE(step);
    const uint64_t steps_before = rig.calibrator.stats().steps;
    rig.sim.step_realtime(step);
    rig.calibrator.tick();  // the very next sample
    auto s = rig.calibrator.stats();
    EXPECT_EQ(s.steps, steps_before + 1);
    EXPECT_NEAR(static_cast<double>(s.last_step_ns), static_cast<double>(step), 20'000.0);
    EXPECT_EQ(s.points, 1u);
    EXPECT_EQ(s.quality, ClockQuality::kWarmingUp);
    EXPECT_NEAR(s.drift_ppm, 37.0, 0.5);  // slope kept across the step
    EXPECT_LT(std::abs(rig.mapping_error_ns()), 20'000);

    // Had pre-step points stayed in the window, a step this size would tilt the slope by
    // hundreds of ppm.
    rig.run_for(30);
    s = rig.calibrator.stats();
    EXPECT_EQ(s.steps, steps_before + 1);
    EXPECT_EQ(s.quality, ClockQuality::kGood);
    EXPECT_NEAR(s.drift_ppm, 37.0, 0.5);
    EXPECT_LT(std::abs(rig.mapping_error_ns()), 3000);
  }
}

TEST(DriftCalibrator, DriftRateChangeMarksDegradedSamplesFasterAndRecovers) {
  Rig rig(drifting(37.0));
  rig.run_for(60);
  ASSERT_EQ(rig.calibrator.stats().quality, ClockQuality::kGood);

  rig.sim.set_drift_rate_ppm_per_s(2.0);  // an oscillator warming up fast
  double degraded_after = -1;
  const int64_t ramp_start = rig.sim.now_monotonic_ns();
  rig.run_for(20, [&] {
    if (degraded_after < 0 && rig.calibrator.stats().quality == ClockQuality::kDegraded) {
      degraded_after = double(rig.sim.now_monotonic_ns() - ramp_start) / kSecond;
      EXPECT_EQ(rig.calibrator.recommended_interval(), milliseconds(100));
    }
  });
  ASSERT_GE(degraded_after, 0) << "never marked degraded";
  EXPECT_LT(degraded_after, 10.0);
  auto s = rig.calibrator.stats();
  EXPECT_EQ(s.quality, ClockQuality::kDegraded);
  EXPECT_NEAR(s.drift_rate_ppm_per_s, 2.0, 0.5);
  // While degraded the mapping follows the moving drift rather than a stale long-window slope.
  EXPECT_NEAR(s.drift_ppm, rig.sim.drift_ppm_now(), 3.0);  // a stale slope would be ~40 ppm off
  EXPECT_LT(std::abs(rig.mapping_error_ns()), 5000);

  rig.sim.set_drift_rate_ppm_per_s(0.0);  // settles at the new drift
  rig.run_for(60);
  s = rig.calibrator.stats();
  EXPECT_EQ(s.quality, ClockQuality::kGood);
  EXPECT_EQ(s.recommended_interval, milliseconds(500));
  EXPECT_NEAR(s.drift_ppm, rig.sim.drift_ppm_now(), 0.5);
  EXPECT_LT(std::abs(rig.mapping_error_ns()), 3000);
  EXPECT_EQ(s.steps, 0u);
}

TEST(DriftCalibrator, SuddenFrequencyChangeIsADriftRateChangeNotAStep) {
  Rig rig(drifting(37.0));
  rig.run_for(60);
  rig.sim.set_drift_ppm(57.0);
  bool degraded = false;
  rig.run_for(20, [&] { degraded |= rig.calibrator.stats().quality == ClockQuality::kDegraded; });
  EXPECT_TRUE(degraded);
  rig.run_for(60);
  const auto s = rig.calibrator.stats();
  EXPECT_EQ(s.quality, ClockQuality::kGood);
  EXPECT_EQ(s.steps, 0u);
  EXPECT_NEAR(s.drift_ppm, 57.0, 0.5);
}

TEST(DriftCalibrator, KeepsTheNarrowestBracketWhenReadsArePreempted) {
  SimulatedClockOptions o = drifting(37.0, 0.0);
  o.read_cost_ns = 25;
  o.preempt_probability = 0.3;
  o.preempt_ns = 50'000;
  SimulatedClockSource sim(o);
  DriftCalibrator calibrator(sim);
  int narrow = 0;
  for (int i = 0; i < 1000; ++i) {
    const ClockSample s = calibrator.sample();
    if (s.bracket_ns == 2 * o.read_cost_ns) {
      ++narrow;
      // An unpreempted bracket pins the realtime read to its midpoint.
      ASSERT_LE(std::abs(s.real_ns - sim.true_realtime_at(s.mono_ns)), 1);
    }
    sim.advance(100'000'000);
  }
  // One try is clean with p = 0.49; all five dirty with p = 0.035.
  EXPECT_GT(narrow, 900);
}

// While warming up, a line through a few samples a tenth of a second apart would turn one
// sample's read error (the realtime read anywhere in its bracket) into a slope of hundreds of
// ppm: the agent's first second of events was stamped hundreds of µs off. Until min_points
// samples only the offset is fitted.
TEST(DriftCalibrator, AWarmingUpMappingIsNotTiltedByOneSamplesReadError) {
  SimulatedClockSource sim(drifting(0.0, 0.0));
  DriftCalibrator calibrator(sim);
  const int64_t m0 = sim.now_monotonic_ns();
  ASSERT_TRUE(calibrator.add_sample({m0, sim.true_realtime_at(m0), 100}));
  const int64_t m1 = m0 + 100'000'000;
  // Read at the end of a 160 µs bracket: 80 µs late against its midpoint.
  ASSERT_TRUE(calibrator.add_sample({m1, sim.true_realtime_at(m1) + 80'000, 160'000}));
  const int64_t later = m1 + kSecond;
  EXPECT_LT(std::abs(static_cast<int64_t>(calibrator.to_wall_ns(static_cast<uint64_t>(later))) -
                     sim.true_realtime_at(later)),
            80'000)
      << "a second later the mapping must still be within one sample's read error";
  EXPECT_EQ(calibrator.stats().quality, ClockQuality::kWarmingUp);
}

TEST(DriftCalibrator, DiscardsSamplesWhoseBracketIsTooWide) {
  SimulatedClockOptions o = drifting(37.0, 0.0);
  o.read_cost_ns = 150'000;  // every bracket is 300 us, over the 200 us limit
  SimulatedClockSource sim(o);
  DriftCalibrator calibrator(sim);
  calibrator.tick();
  calibrator.tick();
  const auto s = calibrator.stats();
  EXPECT_EQ(s.discarded_samples, 2u);
  EXPECT_EQ(s.samples, 0u);
  EXPECT_EQ(s.last_bracket_ns, 300'000);
  EXPECT_FALSE(calibrator.has_mapping());
}

}  // namespace
}  // namespace mcp::clock
