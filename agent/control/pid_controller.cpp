#include "control/pid_controller.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace mcp::control {

PidController::PidController(PidConfig config) : config_(config) {
  if (!(config_.out_min <= config_.out_max)) {
    throw usage_error("pid: out_min must not exceed out_max");
  }
  if (config_.derivative_tau_s < 0 || config_.back_calculation_gain < 0) {
    throw usage_error("pid: derivative_tau_s and back_calculation_gain must be >= 0");
  }
  output_ = std::clamp(0.0, config_.out_min, config_.out_max);
}

void PidController::set_output_limits(double out_min, double out_max) {
  if (!(out_min <= out_max)) throw usage_error("pid: out_min must not exceed out_max");
  config_.out_min = out_min;
  config_.out_max = out_max;
  output_ = std::clamp(output_, out_min, out_max);
}

void PidController::set_gains(double kp, double ki, double kd) {
  config_.kp = kp;
  config_.ki = ki;
  config_.kd = kd;
}

void PidController::reset(double integral) {
  integral_ = integral;
  derivative_ = 0.0;
  has_last_ = false;
  saturated_ = false;
}

double PidController::update(double setpoint, double measurement, double dt_s,
                             double feedforward) {
  if (!(dt_s > 0.0) || !std::isfinite(measurement) || !std::isfinite(setpoint)) return output_;
  const double error = setpoint - measurement;

  if (config_.kd != 0.0 && has_last_) {
    const double raw = (measurement - last_measurement_) / dt_s;
    if (config_.derivative_tau_s > 0.0) {
      const double alpha = dt_s / (config_.derivative_tau_s + dt_s);
      derivative_ += alpha * (raw - derivative_);
    } else {
      derivative_ = raw;
    }
  }
  last_measurement_ = measurement;
  has_last_ = true;

  const double p_term = config_.kp * error;
  const double d_term = -config_.kd * derivative_;
  const double candidate_integral = integral_ + config_.ki * error * dt_s;
  const double unsat = feedforward + p_term + candidate_integral + d_term;
  const double sat = std::clamp(unsat, config_.out_min, config_.out_max);

  if (config_.anti_windup == AntiWindup::kConditional) {
    // Integrate unless that drives the output further into the limit it already hits.
    const bool pushes_up = unsat > config_.out_max && error * config_.ki > 0;
    const bool pushes_down = unsat < config_.out_min && error * config_.ki < 0;
    if (!pushes_up && !pushes_down) integral_ = candidate_integral;
  } else {
    integral_ = candidate_integral + config_.back_calculation_gain * (sat - unsat) * dt_s;
  }

  // Final output from the integrator actually kept, so a frozen step is not reported.
  output_ = std::clamp(feedforward + p_term + integral_ + d_term, config_.out_min, config_.out_max);
  saturated_ = output_ != feedforward + p_term + integral_ + d_term;
  return output_;
}

}  // namespace mcp::control
