// PidController: discrete PID with the usual practical fixes; no clock of its own.
//
// Contract:
// - update(setpoint, measurement, dt_s, feedforward) returns
//     clamp(feedforward + Kp*e + I + D, out_min, out_max),   e = setpoint - measurement.
//   The caller passes the time step (seconds); dt_s <= 0 returns the previous output unchanged.
// - Derivative acts on the measurement (D = -Kd * dy/dt), so a setpoint change gives no kick;
//   with derivative_tau_s > 0 it is low-pass filtered (first order, time constant tau). The first
//   update after construction or reset() has no derivative (no previous measurement).
// - Anti-windup: kConditional freezes the integrator while the output is saturated and the error
//   would push it further into the limit; kBackCalculation bleeds the integrator by
//   back_calculation_gain * (saturated - unsaturated output) per second.
// - The limits may change between updates (set_output_limits, e.g. a back-off ceiling); the
//   integrator keeps its value and anti-windup applies against the new limits from then on.
#pragma once

namespace mcp::control {

enum class AntiWindup { kConditional, kBackCalculation };

struct PidConfig {
  double kp = 1.0;
  double ki = 0.0;   // per second
  double kd = 0.0;   // seconds
  double out_min = 0.0;
  double out_max = 1.0;
  AntiWindup anti_windup = AntiWindup::kConditional;
  double back_calculation_gain = 1.0;  // per second; only for kBackCalculation
  double derivative_tau_s = 0.0;       // 0: unfiltered derivative
};

class PidController {
 public:
  explicit PidController(PidConfig config);

  double update(double setpoint, double measurement, double dt_s, double feedforward = 0.0);

  void set_output_limits(double out_min, double out_max);
  void set_gains(double kp, double ki, double kd);
  void reset(double integral = 0.0);

  double output() const { return output_; }
  double integral() const { return integral_; }
  bool saturated() const { return saturated_; }
  const PidConfig& config() const { return config_; }

 private:
  PidConfig config_;
  double integral_ = 0.0;
  double derivative_ = 0.0;     // filtered d(measurement)/dt
  double last_measurement_ = 0.0;
  bool has_last_ = false;
  double output_ = 0.0;
  bool saturated_ = false;
};

}  // namespace mcp::control
