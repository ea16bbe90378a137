// RateController: per-probe adaptive sampling so each probe's KEPT rate tracks a target QPS.
//
// Contract:
// - The agent calls update() for every probe on every tick (nominally 100 ms) with the probe's
//   cumulative counters, summed over CPUs, and a monotonic timestamp. The controller owns no
//   clock and no thread; dt is the time since that probe's previous update.
// - Control variable: the sampling probability p in [min_rate, max_rate], computed in the log
//   domain so the gains are scale free:
//       ln p = ln(target / offered)                         feed-forward
//            + PID(setpoint 1, measurement kept_now / target)  correction
//   offered = (seen - quota_dropped) per second over feedforward_span (short: it must follow
//   steps). kept_now is the kept rate the current p yields now: m * p * offered, where
//   m = (kept + lost) / expected over feedback_span and expected = sum of p_applied * offered
//   per tick (p_applied: the probability of the threshold last handed out). m is the plant's
//   gain (1 when the kernel keeps exactly p of what it is offered), so a step in the offered rate
//   moves kept and expected together and cannot wind up the integrator the way a lagging 1 s
//   kept average would; the PID only learns what the feed-forward misses. The normalised
//   measurement is clamped to [0, 2]. PID output limits are [ln min_rate, ln ceiling], so when
//   p saturates (offered < target gives p = max_rate) the integrator does not wind up.
// - Lost events (ring buffer full) cut a ceiling on p multiplicatively (loss_decrease) on every
//   tick that saw a loss; without losses the ceiling grows back by loss_recovery_per_s per second.
// - The threshold callback fires when a probe is added (initial_rate) and afterwards only when p
//   moved by more than min_relative_change (relative) or reached min_rate / max_rate exactly.
//   The threshold is mcp::probability_to_threshold(p) (UINT64_MAX at p = 1).
// - A probe whose target is <= 0 is passive: counted and reported, p stays at initial_rate.
// - Not thread-safe: one control thread owns it.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "control/pid_controller.h"
#include "control/rate_window.h"

namespace mcp::control {

// Cumulative per-probe counters, each summed over CPUs (monotonic; a decrease means reset).
struct ProbeCounters {
  uint64_t seen = 0;           // probe hits
  uint64_t kept = 0;           // events that made it into the ring buffer
  uint64_t lost = 0;           // kept by the decision but the ring buffer was full
  uint64_t quota_dropped = 0;  // dropped by a tenant quota before the probability decision
};

struct ProbeSample {
  uint32_t probe_id = 0;
  ProbeCounters counters;
};

struct RateControllerConfig {
  double target_qps = 0.0;    // default for probes added without their own; <= 0: passive
  double min_rate = 1e-6;     // > 0
  double max_rate = 1.0;      // <= 1
  double initial_rate = 1.0;  // clamped into [min_rate, max_rate]
  RateWindowConfig window{};  // offered/kept/lost windows: 100 ms buckets, 1 s
  std::chrono::nanoseconds feedforward_span{std::chrono::milliseconds(300)};
  std::chrono::nanoseconds feedback_span{std::chrono::seconds(1)};
  double kp = 0.3;
  double ki = 0.5;            // per second
  double kd = 0.0;            // seconds
  double derivative_tau_s = 0.2;
  double loss_decrease = 0.5;        // ceiling *= this on each tick with losses
  double loss_recovery_per_s = 2.0;  // ceiling *= this per second without losses
  double min_relative_change = 0.02; // report thresholds only on a larger move
};

struct ProbeRateStats {
  uint32_t probe_id = 0;
  double target_qps = 0.0;
  double rate = 1.0;          // sampling probability in force: that of `threshold`
  double desired_rate = 1.0;  // the controller's latest p (differs within min_relative_change)
  uint64_t threshold = UINT64_MAX;  // last threshold handed to the callback
  double offered_qps = 0.0;   // (seen - quota_dropped) per second over the window
  double seen_qps = 0.0;
  double kept_qps = 0.0;
  double lost_qps = 0.0;
  double ceiling = 1.0;       // loss back-off ceiling on p (max_rate when none)
  double gain = 1.0;          // m: (kept + lost) / expected over the feedback span
};

using ThresholdCallback = std::function<void(uint32_t probe_id, uint64_t threshold)>;

class RateController {
 public:
  // Throws mcp::Error (usage) on an inconsistent config.
  RateController(RateControllerConfig config, ThresholdCallback on_threshold);

  // Registers a probe (target defaults to config.target_qps) and reports its initial threshold.
  // Adding a known probe only changes its target.
  void add_probe(uint32_t probe_id, std::optional<double> target_qps = std::nullopt);
  void remove_probe(uint32_t probe_id);
  void set_target(uint32_t probe_id, double target_qps);

  // One control step for one probe; unknown probes are added first.
  void update(uint32_t probe_id, uint64_t now_ns, const ProbeCounters& counters);
  // One control step for all probes in `samples`, same timestamp.
  void tick(uint64_t now_ns, std::span<const ProbeSample> samples);

  std::optional<ProbeRateStats> stats(uint32_t probe_id) const;
  std::vector<ProbeRateStats> all_stats() const;  // ordered by probe id
  std::size_t size() const { return probes_.size(); }
  const RateControllerConfig& config() const { return config_; }

 private:
  struct Probe {
    Probe(const RateControllerConfig& c, const PidConfig& pid);
    double target = 0.0;
    RateWindow seen, kept, lost, quota_dropped, expected;
    ProbeCounters last;
    double expected_total = 0.0;  // sum of p_applied * offered events
    PidController pid;
    double rate = 1.0;
    double ceiling = 1.0;
    uint64_t last_ns = 0;
    bool started = false;
    double reported_rate = 0.0;
    uint64_t threshold = UINT64_MAX;
    double gain = 1.0;
  };
  Probe& probe(uint32_t probe_id, std::optional<double> target_qps);
  void report(uint32_t probe_id, Probe& p, bool force);
  ProbeRateStats make_stats(uint32_t probe_id, const Probe& p) const;

  RateControllerConfig config_;
  PidConfig pid_config_;
  ThresholdCallback on_threshold_;
  std::unordered_map<uint32_t, Probe> probes_;
};

}  // namespace mcp::control
