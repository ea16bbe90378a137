// A simulated probe for RateController tests: offered events per tick are Poisson around a
// scripted rate, kept ~ Binomial(offered, p) with p taken from the threshold the controller
// last handed out (as the kernel would see it), counters cumulative. Deterministic per seed.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "common/event.h"
#include "control/rate_controller.h"

namespace mcp::control::testing {

struct SimResult {
  std::vector<double> kept_per_second;   // true kept events in each whole simulated second
  std::vector<double> rate_at_second;    // p at the end of each second
};

class WorkloadSim {
 public:
  WorkloadSim(RateController& controller, uint32_t probe_id, uint64_t seed)
      : controller_(controller), probe_id_(probe_id), rng_(seed) {}

  // Last threshold the controller published for our probe; wire this into its callback.
  void on_threshold(uint32_t probe_id, uint64_t threshold) {
    if (probe_id == probe_id_) threshold_ = threshold;
  }

  // Runs `seconds` of 100 ms ticks; offered_qps(t) gives the offered rate at time t (s).
  // ring_capacity_per_tick: kept events beyond it in one tick are lost (0 = unbounded).
  // skip_update_every: every Nth tick the agent is late and does not call the controller, so
  // the next update covers two ticks (0 = never).
  SimResult run(double seconds, const std::function<double(double)>& offered_qps,
                uint64_t ring_capacity_per_tick = 0, int skip_update_every = 0) {
    SimResult out;
    if (!started_) {  // the agent looks at the counters once when the probe is attached
      started_ = true;
      controller_.update(probe_id_, now_ns_, counters_);
    }
    double kept_this_second = 0;
    const int ticks = static_cast<int>(seconds * 10 + 0.5);
    for (int i = 0; i < ticks; ++i) {
      const double t = now_ns_ * 1e-9;
      const double p = threshold_to_probability(threshold_);
      std::poisson_distribution<uint64_t> offered(offered_qps(t) * 0.1);
      const uint64_t n = offered(rng_);
      std::binomial_distribution<uint64_t> keep(n, p);
      uint64_t k = keep(rng_);
      if (ring_capacity_per_tick != 0 && k > ring_capacity_per_tick) {
        counters_.lost += k - ring_capacity_per_tick;
        k = ring_capacity_per_tick;
      }
      counters_.seen += n;
      counters_.kept += k;
      kept_this_second += static_cast<double>(k);
      now_ns_ += 100'000'000;
      if (skip_update_every == 0 || (i + 1) % skip_update_every != 0) {
        controller_.update(probe_id_, now_ns_, counters_);
      }
      if ((i + 1) % 10 == 0) {
        out.kept_per_second.push_back(kept_this_second);
        out.rate_at_second.push_back(threshold_to_probability(threshold_));
        kept_this_second = 0;
      }
    }
    return out;
  }

  uint64_t now_ns() const { return now_ns_; }
  uint64_t threshold() const { return threshold_; }
  const ProbeCounters& counters() const { return counters_; }

 private:
  RateController& controller_;
  uint32_t probe_id_;
  std::mt19937_64 rng_;
  uint64_t threshold_ = UINT64_MAX;
  uint64_t now_ns_ = 1'000'000'000;  // arbitrary monotonic origin
  ProbeCounters counters_;
  bool started_ = false;
};

}  // namespace mcp::control::testing
