#include "control/pid_controller.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"

namespace mcp::control {
namespace {

// First-order plant y' = (gain * u - y) / tau, integrated exactly over each step.
struct FirstOrderPlant {
  double gain = 2.0;
  double tau = 0.5;
  double y = 0.0;
  double step(double u, double dt) {
    const double a = std::exp(-dt / tau);
    y = y * a + gain * u * (1 - a);
    return y;
  }
};

constexpr double kDt = 0.01;

TEST(PidController, SettlesWithinTwoPercentAfterStep) {
  PidController pid({.kp = 0.5, .ki = 2.0, .kd = 0.0, .out_min = -10, .out_max = 10});
  FirstOrderPlant plant;
  double y = 0;
  double peak = 0;
  for (int i = 0; i < 300; ++i) {  // 3 s
    y = plant.step(pid.update(1.0, y, kDt), kDt);
    peak = std::max(peak, y);
  }
  EXPECT_NEAR(y, 1.0, 0.02);
  EXPECT_LT(peak, 1.3);  // stable, modest overshoot
  for (int i = 0; i < 200; ++i) y = plant.step(pid.update(1.0, y, kDt), kDt);
  EXPECT_NEAR(y, 1.0, 0.001);  // integral removes the steady-state error
}

TEST(PidController, ProportionalOnlyLeavesSteadyStateErrorIntegralRemovesIt) {
  PidController p_only({.kp = 1.0, .ki = 0.0, .out_min = -10, .out_max = 10});
  FirstOrderPlant plant;
  double y = 0;
  for (int i = 0; i < 500; ++i) y = plant.step(p_only.update(1.0, y, kDt), kDt);
  EXPECT_NEAR(y, 2.0 / 3.0, 0.01);  // K*kp/(1+K*kp)
}

TEST(PidController, DerivativeActsOnMeasurementSoSetpointChangeGivesNoKick) {
  PidController pid({.kp = 0.0, .ki = 0.0, .kd = 1.0, .out_min = -100, .out_max = 100});
  pid.update(0.0, 0.5, kDt);
  // Setpoint jumps, measurement does not: derivative on error would output kd*1/dt = 100.
  EXPECT_DOUBLE_EQ(pid.update(1.0, 0.5, kDt), 0.0);
  // Measurement rises by 0.01 in 10 ms: D = -kd * 1/s.
  EXPECT_NEAR(pid.update(1.0, 0.51, kDt), -1.0, 1e-9);
}

TEST(PidController, DerivativeLowPassSmoothsMeasurementNoise) {
  PidController raw({.kp = 0, .ki = 0, .kd = 0.1, .out_min = -1e9, .out_max = 1e9});
  PidController filtered(
      {.kp = 0, .ki = 0, .kd = 0.1, .out_min = -1e9, .out_max = 1e9, .derivative_tau_s = 0.1});
  double raw_max = 0, filtered_max = 0;
  for (int i = 0; i < 100; ++i) {
    const double noisy = (i % 2 == 0) ? 0.01 : -0.01;  // alternating noise around 0
    raw_max = std::max(raw_max, std::abs(raw.update(0, noisy, kDt)));
    filtered_max = std::max(filtered_max, std::abs(filtered.update(0, noisy, kDt)));
  }
  EXPECT_NEAR(raw_max, 0.2, 1e-9);
  EXPECT_LT(filtered_max, raw_max / 5);
}

TEST(PidController, OutputIsClampedToLimits) {
  PidController pid({.kp = 100.0, .ki = 0.0, .out_min = 0.001, .out_max = 1.0});
  EXPECT_DOUBLE_EQ(pid.update(1.0, 0.0, kDt), 1.0);
  EXPECT_TRUE(pid.saturated());
  EXPECT_DOUBLE_EQ(pid.update(0.0, 1.0, kDt), 0.001);
  EXPECT_TRUE(pid.saturated());
}

// While the plant cannot follow (output saturated), a naive integrator winds up and then holds
// the output at the limit long after the error reverses. Both anti-windup modes must let go fast.
double time_to_leave_saturation(AntiWindup mode) {
  PidController pid({.kp = 0.5, .ki = 2.0, .out_min = 0.0, .out_max = 1.0, .anti_windup = mode,
                     .back_calculation_gain = 5.0});
  for (int i = 0; i < 1000; ++i) pid.update(10.0, 0.0, kDt);  // 10 s pinned at 1.0
  EXPECT_DOUBLE_EQ(pid.output(), 1.0);
  EXPECT_LT(pid.integral(), 2.0);
  for (int i = 0; i < 1000; ++i) {
    if (pid.update(0.0, 1.0, kDt) < 1.0) return i * kDt;  // error now negative
  }
  return 1e9;
}

TEST(PidController, ConditionalIntegrationPreventsWindup) {
  EXPECT_LT(time_to_leave_saturation(AntiWindup::kConditional), 0.1);
}

TEST(PidController, BackCalculationPreventsWindup) {
  EXPECT_LT(time_to_leave_saturation(AntiWindup::kBackCalculation), 0.5);
}

TEST(PidController, FeedforwardAddsToTheOutputAndCountsForSaturation) {
  PidController pid({.kp = 1.0, .ki = 1.0, .out_min = -1.0, .out_max = 0.0});
  EXPECT_DOUBLE_EQ(pid.update(0.2, 0.0, kDt, -0.5), -0.5 + 0.2 + 0.002);
  for (int i = 0; i < 500; ++i) pid.update(1.0, 0.0, kDt, 0.0);  // saturated high via ff
  EXPECT_LT(pid.integral(), 0.05);
}

TEST(PidController, TighterLimitsApplyImmediately) {
  PidController pid({.kp = 1.0, .ki = 0.0, .out_min = -5, .out_max = 5});
  EXPECT_DOUBLE_EQ(pid.update(3.0, 0.0, kDt), 3.0);
  pid.set_output_limits(-5, 1.0);
  EXPECT_DOUBLE_EQ(pid.update(3.0, 0.0, kDt), 1.0);
  EXPECT_THROW(pid.set_output_limits(2.0, 1.0), mcp::Error);
}

TEST(PidController, NonPositiveTimeStepKeepsOutput) {
  PidController pid({.kp = 1.0, .ki = 1.0, .out_min = -5, .out_max = 5});
  const double out = pid.update(1.0, 0.0, kDt);
  EXPECT_DOUBLE_EQ(pid.update(4.0, 0.0, 0.0), out);
  EXPECT_DOUBLE_EQ(pid.update(4.0, 0.0, -1.0), out);
}

}  // namespace
}  // namespace mcp::control
