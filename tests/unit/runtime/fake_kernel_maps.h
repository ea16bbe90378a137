// FakeKernelMaps: loader::KernelMaps in memory. Probes, counters and thresholds are
// plain vectors; set_quota calls are recorded; scope_cgroups is a map that counts its
// writes and, like the kernel's, refuses a new key when full (scope_capacity). advance() plays the kernel: `calls`
// events per probe, each kept with the probe's current probability.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/error.h"
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

  // Ids start at 1, as the kernel's (0 is "none"; in scope_cgroups, the tenants).
  uint32_t add(const std::string& name, bool internal = false, const std::string& symbol = {}) {
    loader::ProbeInfo p;
    p.id = static_cast<uint32_t>(probes_.size() + 1);
    p.name = name;
    p.internal = internal;
    p.symbol = symbol;
    probes_.push_back(p);
    counters_.resize(p.id + 1);
    thresholds_.resize(p.id + 1, UINT64_MAX);
    return p.id;
  }
  void advance(uint64_t calls) {
    for (const auto& probe : probes_) {
      const uint32_t i = probe.id;
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
  void put_scope(uint32_t probe_id, uint64_t cgroup_id, uint64_t value) override {
    const auto key = std::make_pair(probe_id, cgroup_id);
    if (!scope.count(key) && scope.size() >= scope_capacity) throw runtime_error("scope_cgroups is full");
    scope[key] = value;
    scope_writes++;
  }
  void erase_scope(uint32_t probe_id, uint64_t cgroup_id) override {
    scope.erase({probe_id, cgroup_id});
    scope_writes++;
  }
  std::vector<uint64_t> tenant_demand_per_cpu(uint32_t) const override { return std::vector<uint64_t>(2, 0); }
  void put_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix, uint32_t slot, uint64_t threshold) override {
    prefixes[{probe_id, prefix.digits}] = {slot, threshold};
  }
  void erase_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix) override {
    prefixes.erase({probe_id, prefix.digits});
  }
  void clear_prefix_counters(uint32_t slot) override { prefix_counts[slot] = {}; }
  loader::ProbeCounters prefix_counters(uint32_t slot) const override {
    const auto it = prefix_counts.find(slot);
    return it == prefix_counts.end() ? loader::ProbeCounters{} : it->second;
  }
  void set_trace_id(uint32_t id) { probes_.at(id - 1).trace_id = true; }

  // (probe id, prefix digits) -> (slot, threshold), as the kernel's trace_prefixes holds them.
  std::map<std::pair<uint32_t, std::string>, std::pair<uint32_t, uint64_t>> prefixes;
  std::map<uint32_t, loader::ProbeCounters> prefix_counts;
  int ncpus() const override { return 2; }

  std::vector<QuotaWrite> quota_writes;
  // The tenant entries (probe id 0) as (cgroup, tenant id), sorted.
  std::vector<std::pair<uint64_t, uint64_t>> tenants() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [key, value] : scope)
      if (key.first == 0) out.emplace_back(key.second, value);
    return out;
  }
  // The cgroups in probe `probe_id`'s scope, sorted.
  std::vector<uint64_t> scope_of(uint32_t probe_id) const {
    std::vector<uint64_t> out;
    for (const auto& [key, value] : scope)
      if (key.first == probe_id) out.push_back(key.second);
    return out;
  }
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> scope;  // (probe id, cgroup) -> value
  size_t scope_writes = 0;                                 // put_scope and erase_scope calls
  size_t scope_capacity = SIZE_MAX;

 private:
  std::vector<loader::ProbeInfo> probes_;
  std::vector<loader::ProbeCounters> counters_{1};  // by probe id (slot 0 unused)
  std::vector<uint64_t> thresholds_{UINT64_MAX};
  std::map<size_t, double> kept_frac_;
};

}  // namespace mcp::test
