// FakeKernelMaps: loader::KernelMaps in memory. Probes, counters and thresholds are
// plain vectors; set_quota calls are recorded. advance() plays the kernel: `calls`
// events per probe, each kept with the probe's current probability.
#pragma once
#include <map>
#include <vector>

#include "common/event.h"
#include "loader/kernel_maps.h"

namespace mcp::test {

class FakeKernelMaps : public loader::KernelMaps {
 public:
  struct QuotaWrite {
    uint32_t bucket;
    double rate;
    uint64_t burst;
  };

  uint32_t add(const std::string& name, bool internal = false, const std::string& symbol = {}) {
    loader::ProbeInfo p;
    p.id = static_cast<uint32_t>(probes_.size());
    p.name = name;
    p.internal = internal;
    p.symbol = symbol;
    probes_.push_back(p);
    counters_.emplace_back();
    thresholds_.push_back(UINT64_MAX);
    return p.id;
  }
  void advance(uint64_t calls) {
    for (size_t i = 0; i < probes_.size(); i++) {
      const double p = threshold_to_probability(thresholds_[i]);
      counters_[i].seen += calls;
      kept_frac_[i] += static_cast<double>(calls) * p;
      const auto whole = static_cast<uint64_t>(kept_frac_[i]);
      counters_[i].kept += whole;
      kept_frac_[i] -= static_cast<double>(whole);
    }
  }
  loader::ProbeCounters& counters(uint32_t id) { return counters_[id]; }

  std::vector<loader::ProbeInfo> probes() const override { return probes_; }
  std::vector<loader::ProbeCounters> all_counters() const override { return counters_; }
  void set_threshold(uint32_t id, uint64_t t) override { thresholds_.at(id) = t; }
  uint64_t threshold(uint32_t id) const override { return thresholds_.at(id); }
  void set_quota(uint32_t bucket, double rate, uint64_t burst, const std::vector<double>&) override {
    quota_writes.push_back({bucket, rate, burst});
  }
  void set_tenant_cgroups(const std::vector<uint64_t>& ids) override { tenant_cgroups = ids; }
  std::vector<uint64_t> tenant_demand_per_cpu(uint32_t) const override { return std::vector<uint64_t>(2, 0); }
  int ncpus() const override { return 2; }

  std::vector<QuotaWrite> quota_writes;
  std::vector<uint64_t> tenant_cgroups;  // the last set_tenant_cgroups

 private:
  std::vector<loader::ProbeInfo> probes_;
  std::vector<loader::ProbeCounters> counters_;
  std::vector<uint64_t> thresholds_;
  std::map<size_t, double> kept_frac_;
};

}  // namespace mcp::test
