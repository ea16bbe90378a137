// ScopeTable: the one writer of the kernel's scope_cgroups (bpf/maps.bpf.h, mcp_scope_key),
// which holds every cgroup scope: tenants (probe id 0, value = tenant id) and the scopes of
// probes (probe id N, value 1). It merges the sources into the entries the kernel should hold:
//   tenants     the quota table's tenants: a cgroup path's cgroup, or every pod cgroup of a
//               pod:/namespace: tenant; where two claim a cgroup, a pod beats a cgroup path,
//               which beats a namespace
//   selectors   a probe's cgroups (a cgroup path or container id resolved once, or a
//               container-aware probe's current container cgroups, replaced as they change)
//               or its pods (`pod:`/`namespace:`, resolved at every write)
// and writes only what differs from what it wrote before: adds and changes first, then
// removals, so a cgroup moving between tenants is never without one. The kernel matches an
// entry's cgroup and everything below it (the task's own cgroup or an ancestor).
// pod:/namespace: references are resolved through `Resolve` at write time (the control loop
// passes the pod watch's PodCgroups). Not thread-safe: the ControlLoop owns it and calls it
// under its lock.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "control/tenant_quota.h"
#include "k8s/pod_ref.h"
#include "loader/kernel_maps.h"

namespace mcp::runtime {

class ScopeTable {
 public:
  // The cgroup ids of the pods `ref` names now; `what` names the reference for logs.
  using Resolve = std::function<std::vector<uint64_t>(const k8s::PodRef& ref, const std::string& what)>;

  explicit ScopeTable(loader::KernelMaps& maps) : maps_(maps) {}

  // Sources; written by the next write().
  void set_tenants(std::vector<control::ResolvedTenant> tenants) { tenants_ = std::move(tenants); }
  void set_probe(uint32_t probe_id, std::set<uint64_t> cgroups) { probes_[probe_id] = std::move(cgroups); }
  void set_probe(uint32_t probe_id, k8s::PodRef pods) { probes_[probe_id] = std::move(pods); }
  // Drops a probe's source and its entries now (a later probe given the id starts with none).
  void forget(uint32_t probe_id);
  // Whether a source names pods (then the writes must follow the pod watch).
  bool names_pods() const;

  // Writes every source (probe_id: only that one; 0 is the tenants). Throws mcp::Error when
  // the kernel's map is full, after writing every other entry that differs.
  void write(const Resolve& resolve);
  void write(uint32_t probe_id, const Resolve& resolve);

  // What the kernel holds for `probe_id` (0: tenants): cgroup id -> value.
  std::map<uint64_t, uint64_t> written(uint32_t probe_id) const;

 private:
  using Source = std::variant<std::set<uint64_t>, k8s::PodRef>;
  std::map<uint64_t, uint64_t> wanted(uint32_t probe_id, const Resolve& resolve) const;
  // Makes the kernel's entries of `probe_id` exactly `entries`, writing only the differences.
  void replace(uint32_t probe_id, const std::map<uint64_t, uint64_t>& entries);

  loader::KernelMaps& maps_;
  std::vector<control::ResolvedTenant> tenants_;
  std::map<uint32_t, Source> probes_;
  std::map<uint32_t, std::map<uint64_t, uint64_t>> written_;  // probe id (0: tenants) -> cgroup -> value
};

}  // namespace mcp::runtime
