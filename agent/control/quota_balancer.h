// QuotaBalancer: splits one tenant bucket's node-wide quota over the CPUs'
// token buckets by recent demand, so a tenant running on one CPU still gets its
// whole quota while the kernel's hot path touches only per-CPU state.
// Fed every control tick with the cumulative per-CPU demand (events sampled in:
// kept + quota-dropped); returns shares that sum to 1. Every CPU keeps a floor
// share so a tenant that moves CPUs is admitted at once, not one tick later.
#pragma once
#include <cstdint>
#include <vector>

namespace mcp::control {

class QuotaBalancer {
 public:
  explicit QuotaBalancer(int ncpus, double floor_fraction = 0.2, double smoothing = 0.5);
  // Returns the new shares; unchanged (initially even) when there was no demand.
  const std::vector<double>& update(const std::vector<uint64_t>& cumulative_demand);
  const std::vector<double>& shares() const { return shares_; }

 private:
  double floor_fraction_, smoothing_;
  std::vector<double> shares_;
  std::vector<uint64_t> last_;
  bool primed_ = false;
};

}  // namespace mcp::control
