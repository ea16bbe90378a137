#include "control/quota_balancer.h"

#include <cstddef>

namespace mcp::control {

QuotaBalancer::QuotaBalancer(int ncpus, double floor_fraction, double smoothing)
    : floor_fraction_(floor_fraction), smoothing_(smoothing), shares_(ncpus, 1.0 / ncpus), last_(ncpus, 0) {}

const std::vector<double>& QuotaBalancer::update(const std::vector<uint64_t>& cumulative) {
  if (cumulative.size() != shares_.size()) return shares_;
  std::vector<double> delta(cumulative.size());
  double total = 0;
  for (size_t i = 0; i < cumulative.size(); i++) {
    // A counter that went backwards (reset) counts from zero.
    delta[i] = static_cast<double>(cumulative[i] >= last_[i] ? cumulative[i] - last_[i] : cumulative[i]);
    total += delta[i];
  }
  last_ = cumulative;
  if (!primed_) {
    primed_ = true;  // the first reading is history, not this tick's demand
    return shares_;
  }
  if (total <= 0) return shares_;
  const double n = static_cast<double>(shares_.size());
  for (size_t i = 0; i < shares_.size(); i++) {
    const double target = (1 - floor_fraction_) * delta[i] / total + floor_fraction_ / n;
    shares_[i] = smoothing_ * shares_[i] + (1 - smoothing_) * target;
  }
  return shares_;
}

}  // namespace mcp::control
