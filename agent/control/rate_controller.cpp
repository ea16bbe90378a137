#include "control/rate_controller.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/event.h"

namespace mcp::control {

namespace {
// The normalised measurement is clamped so that a single burst (p = 1 meeting a flood) moves
// ln p by at most kp per tick and the integrator by at most ki per second.
constexpr double kMaxNormalisedKept = 2.0;
// Below this many expected events in the feedback span the gain estimate is mostly noise.
constexpr double kMinExpectedForGain = 20.0;
constexpr double kMinGain = 0.05;
constexpr double kMaxGain = 20.0;

// Increase of a cumulative counter; a decrease means it was reset to zero in between.
uint64_t increase(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }
}  // namespace

RateController::Probe::Probe(const RateControllerConfig& c, const PidConfig& pid_config)
    : seen(c.window),
      kept(c.window),
      lost(c.window),
      quota_dropped(c.window),
      expected(c.window),
      pid(pid_config) {
  rate = std::clamp(c.initial_rate, c.min_rate, c.max_rate);
  ceiling = c.max_rate;
}

RateController::RateController(RateControllerConfig config, ThresholdCallback on_threshold)
    : config_(config), on_threshold_(std::move(on_threshold)) {
  const auto& c = config_;
  if (!(c.min_rate > 0.0) || !(c.min_rate <= c.max_rate) || !(c.max_rate <= 1.0)) {
    throw usage_error("rate controller: need 0 < min_rate <= max_rate <= 1");
  }
  if (!(c.loss_decrease > 0.0 && c.loss_decrease < 1.0) || !(c.loss_recovery_per_s >= 1.0)) {
    throw usage_error("rate controller: need 0 < loss_decrease < 1 and loss_recovery_per_s >= 1");
  }
  if (c.feedforward_span.count() <= 0 || c.feedback_span.count() <= 0 ||
      c.min_relative_change < 0.0) {
    throw usage_error("rate controller: spans must be positive, min_relative_change >= 0");
  }
  pid_config_ = PidConfig{.kp = c.kp,
                          .ki = c.ki,
                          .kd = c.kd,
                          .out_min = std::log(c.min_rate),
                          .out_max = std::log(c.max_rate),
                          .anti_windup = AntiWindup::kConditional,
                          .back_calculation_gain = 1.0,
                          .derivative_tau_s = c.derivative_tau_s};
  PidController check(pid_config_);  // validates the derived config once
}

RateController::Probe& RateController::probe(uint32_t probe_id, std::optional<double> target_qps) {
  auto it = probes_.find(probe_id);
  if (it == probes_.end()) {
    it = probes_.try_emplace(probe_id, config_, pid_config_).first;
    it->second.target = target_qps.value_or(config_.target_qps);
    report(probe_id, it->second, /*force=*/true);
  } else if (target_qps) {
    it->second.target = *target_qps;
  }
  return it->second;
}

void RateController::add_probe(uint32_t probe_id, std::optional<double> target_qps) {
  probe(probe_id, target_qps);
}

void RateController::remove_probe(uint32_t probe_id) { probes_.erase(probe_id); }

void RateController::set_target(uint32_t probe_id, double target_qps) {
  probe(probe_id, target_qps);
}

void RateController::report(uint32_t probe_id, Probe& p, bool force) {
  const bool at_limit = (p.rate == config_.max_rate || p.rate == config_.min_rate) &&
                        p.rate != p.reported_rate;
  const bool moved =
      std::abs(p.rate - p.reported_rate) > config_.min_relative_change * p.reported_rate;
  if (!force && !at_limit && !moved) return;
  p.reported_rate = p.rate;
  p.threshold = probability_to_threshold(p.rate);
  if (on_threshold_) on_threshold_(probe_id, p.threshold);
}

void RateController::update(uint32_t probe_id, uint64_t now_ns, const ProbeCounters& counters) {
  Probe& p = probe(probe_id, std::nullopt);
  const ProbeCounters before = p.last;
  p.last = counters;
  const uint64_t seen_d = increase(counters.seen, before.seen);
  const uint64_t dropped_d = increase(counters.quota_dropped, before.quota_dropped);
  const uint64_t lost_d = increase(counters.lost, before.lost);
  if (p.started) {
    // What the threshold in force since the last update should have kept.
    const uint64_t offered_d = seen_d > dropped_d ? seen_d - dropped_d : 0;
    p.expected_total += threshold_to_probability(p.threshold) * static_cast<double>(offered_d);
  }
  p.seen.observe(now_ns, counters.seen);
  p.kept.observe(now_ns, counters.kept);
  p.lost.observe(now_ns, counters.lost);
  p.quota_dropped.observe(now_ns, counters.quota_dropped);
  p.expected.observe(now_ns, static_cast<uint64_t>(p.expected_total));

  if (!p.started || now_ns <= p.last_ns) {
    p.started = true;
    p.last_ns = std::max(p.last_ns, now_ns);
    return;
  }
  const double dt = static_cast<double>(now_ns - p.last_ns) * 1e-9;
  p.last_ns = now_ns;
  if (!(p.target > 0.0)) return;  // passive probe

  if (lost_d > 0) {
    p.ceiling = std::max(config_.min_rate, std::min(p.ceiling, p.rate) * config_.loss_decrease);
  } else {
    p.ceiling = std::min(config_.max_rate, p.ceiling * std::pow(config_.loss_recovery_per_s, dt));
  }
  const double hi = std::log(p.ceiling);
  p.pid.set_output_limits(pid_config_.out_min, hi);

  const double offered = std::max(0.0, p.seen.rate_per_s(config_.feedforward_span) -
                                           p.quota_dropped.rate_per_s(config_.feedforward_span));
  const double expected = p.expected.rate_per_s(config_.feedback_span);
  const double decided =
      p.kept.rate_per_s(config_.feedback_span) + p.lost.rate_per_s(config_.feedback_span);
  const double span_s =
      std::min(config_.feedback_span, p.expected.covered()).count() * 1e-9;
  p.gain = expected * span_s >= kMinExpectedForGain
               ? std::clamp(decided / expected, kMinGain, kMaxGain)
               : 1.0;

  // Nothing offered: open up to the ceiling, so a quiet probe keeps what little it sees.
  const double feedforward = offered > 0.0 ? std::log(p.target / offered) : hi;
  const double kept_now = p.gain * threshold_to_probability(p.threshold) * offered;
  const double measured = std::clamp(kept_now / p.target, 0.0, kMaxNormalisedKept);
  const double u = p.pid.update(1.0, measured, dt, feedforward);

  // exp(ln x) is not always x: pin the limits exactly so "keep all" stays UINT64_MAX.
  if (u >= hi) {
    p.rate = p.ceiling;
  } else if (u <= pid_config_.out_min) {
    p.rate = config_.min_rate;
  } else {
    p.rate = std::clamp(std::exp(u), config_.min_rate, p.ceiling);
  }
  report(probe_id, p, /*force=*/false);
}

void RateController::tick(uint64_t now_ns, std::span<const ProbeSample> samples) {
  for (const ProbeSample& s : samples) update(s.probe_id, now_ns, s.counters);
}

ProbeRateStats RateController::make_stats(uint32_t probe_id, const Probe& p) const {
  ProbeRateStats s;
  s.probe_id = probe_id;
  s.target_qps = p.target;
  s.rate = p.reported_rate;
  s.desired_rate = p.rate;
  s.threshold = p.threshold;
  s.seen_qps = p.seen.rate_per_s();
  s.offered_qps = std::max(0.0, s.seen_qps - p.quota_dropped.rate_per_s());
  s.kept_qps = p.kept.rate_per_s();
  s.lost_qps = p.lost.rate_per_s();
  s.ceiling = p.ceiling;
  s.gain = p.gain;
  return s;
}

std::optional<ProbeRateStats> RateController::stats(uint32_t probe_id) const {
  auto it = probes_.find(probe_id);
  if (it == probes_.end()) return std::nullopt;
  return make_stats(probe_id, it->second);
}

std::vector<ProbeRateStats> RateController::all_stats() const {
  std::vector<ProbeRateStats> out;
  out.reserve(probes_.size());
  for (const auto& [id, p] : probes_) out.push_back(make_stats(id, p));
  std::sort(out.begin(), out.end(),
            [](const ProbeRateStats& a, const ProbeRateStats& b) { return a.probe_id < b.probe_id; });
  return out;
}

}  // namespace mcp::control
