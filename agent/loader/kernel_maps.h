// KernelMaps: the slice of the kernel side the control loop and the interval counts
// use: the probe list, per-probe counters and thresholds, tenant quotas. BpfSession
// implements it over the BPF maps; unit tests implement it in memory, so steering is
// tested without a kernel. Implementations are safe to call from the control thread
// while the consumer thread reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/trace_id_prefix.h"

namespace mcp::loader {

enum class ProbeFamily { kUprobe, kSyscall, kCuda };

// Summed over CPUs; meanings in bpf/mcp_abi.h (struct mcp_counters). orphaned
// includes the entries the agent swept after detaching (calls never returned).
struct ProbeCounters {
  uint64_t seen = 0, kept = 0, lost = 0, quota_dropped = 0, orphaned = 0;
};

struct ProbeInfo {
  uint32_t id = 0;
  std::string name;      // "/usr/bin/x:fn" or "syscall:getppid"
  ProbeFamily family = ProbeFamily::kUprobe;
  bool latency = false;  // uprobe with uretprobe
  uint8_t nargs = 6;     // meaningful arguments (a syscall's arity)
  bool args_declared = true;  // false: a uprobe whose count nobody declared (nargs 6: every register)
  bool internal = false; // bookkeeping probe: no rate control, not in summaries
  std::string symbol;    // uprobe and CUDA probes: the function name
  bool trace_id = false; // decides on a trace-id argument (its configuration's trace_id_arg)
};

class KernelMaps {
 public:
  virtual ~KernelMaps() = default;
  virtual std::vector<ProbeInfo> probes() const = 0;
  // Every probe id's counters (index = probe id), one batch read.
  virtual std::vector<ProbeCounters> all_counters() const = 0;
  virtual void set_threshold(uint32_t id, uint64_t threshold) = 0;
  // Whether probe `id`, if configured for it, may be sampled in time windows
  // (loader/sampling_windows.h). The rate controller turns them off for the probes it
  // steers: it estimates the offered rate from every call seen. Default: nothing to do.
  virtual void set_windows_allowed(uint32_t /*id*/, bool /*allowed*/) {}
  virtual uint64_t threshold(uint32_t id) const = 0;
  // Tenant bucket quota split over CPUs by cpu_shares (empty: evenly); burst 0 removes it.
  virtual void set_quota(uint32_t bucket, double rate_per_sec, uint64_t burst,
                         const std::vector<double>& cpu_shares = {}) = 0;
  // One entry of scope_cgroups (mcp_scope_key): cgroup `cgroup_id` (v2 id) is a tenant
  // (probe_id 0, value = tenant id) or in probe `probe_id`'s scope (value 1); a task matches
  // through its own cgroup or an ancestor, the deepest entry first. put_scope throws
  // mcp::Error when the map (MCP_MAX_SCOPE_CGROUPS) is full. Only the scope table
  // (runtime/scope_table.h) calls these.
  virtual void put_scope(uint32_t probe_id, uint64_t cgroup_id, uint64_t value) = 0;
  virtual void erase_scope(uint32_t probe_id, uint64_t cgroup_id) = 0;
  // Trace-id prefix rules (bpf/mcp_abi.h, struct mcp_prefix_key): probe `probe_id` decides
  // the ids under `prefix` with `threshold`, counting them at `slot` (1..MCP_MAX_TRACE_PREFIXES-1).
  // put_trace_prefix throws mcp::Error when the kernel's map is full; clear_prefix_counters
  // zeroes a slot before it is reused. Only the control loop's prefix rules call these.
  virtual void put_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix, uint32_t slot,
                                uint64_t threshold) = 0;
  virtual void erase_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix) = 0;
  virtual void clear_prefix_counters(uint32_t slot) = 0;
  // A slot's seen, kept and quota_dropped, summed over CPUs.
  virtual ProbeCounters prefix_counters(uint32_t slot) const = 0;
  // Per CPU: the bucket's sampled-in events (kept + quota-dropped), the demand quotas follow.
  virtual std::vector<uint64_t> tenant_demand_per_cpu(uint32_t bucket) const = 0;
  virtual int ncpus() const = 0;
};

}  // namespace mcp::loader
