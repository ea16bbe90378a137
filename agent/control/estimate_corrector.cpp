#include "control/estimate_corrector.h"

namespace mcp::control {

void EstimateCorrector::on_delivered(uint32_t probe, double weight) {
  State& s = probes_[probe];
  s.delivered++;
  s.weights += weight;
}

void EstimateCorrector::close_interval(uint32_t probe, uint64_t kept, uint64_t quota_dropped) {
  State& s = probes_[probe];
  const uint64_t sampled_in = kept + quota_dropped;
  // Counters only grow for one probe id; a reset id starts again from zero.
  const uint64_t delta = sampled_in >= s.last_sampled_in ? sampled_in - s.last_sampled_in : sampled_in;
  s.last_sampled_in = sampled_in;
  s.carried += delta;
  if (s.delivered == 0) return;  // nothing to scale: carry into the next interval
  // A factor below 1 is right too: records the previous interval counted (and scaled up
  // for) arriving late.
  s.estimate += static_cast<double>(s.carried) / static_cast<double>(s.delivered) * s.weights;
  s.carried = 0;
  s.delivered = 0;
  s.weights = 0;
}

double EstimateCorrector::estimate(uint32_t probe) const {
  auto it = probes_.find(probe);
  return it == probes_.end() ? 0.0 : it->second.estimate;
}

uint64_t EstimateCorrector::uncovered(uint32_t probe) const {
  auto it = probes_.find(probe);
  return it == probes_.end() ? 0 : it->second.carried;
}

}  // namespace mcp::control
