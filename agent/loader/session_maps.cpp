// KernelMaps over the BPF maps: probe configurations and thresholds, counters, tenant
// quotas, scope cgroups and trace-id prefix rules. A failed write a caller can act on throws
// mcp::Error naming the map and the probe; one no caller can be told of is counted
// (map_failures(), loader/map_io.h).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/event.h"
#include "loader/bpf_session.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {

void BpfSession::put_scope(uint32_t probe_id, uint64_t cgroup_id, uint64_t value) {
  const mcp_scope_key key{probe_id, 0, cgroup_id};
  if (map_io_->update(bpf_map__fd(skel()->maps.scope_cgroups), &key, &value, BPF_ANY))
    throw runtime_error("cannot add cgroup " + std::to_string(cgroup_id) + " to scope_cgroups (at most " +
                        std::to_string(MCP_MAX_SCOPE_CGROUPS) + " tenant and probe cgroups): " + errno_text(errno));
}

void BpfSession::erase_scope(uint32_t probe_id, uint64_t cgroup_id) {
  const mcp_scope_key key{probe_id, 0, cgroup_id};
  // ENOENT: already gone. Another failure leaves the cgroup in scope: counted (the scope
  // table's removals cannot fail).
  if (map_io_->erase(bpf_map__fd(skel()->maps.scope_cgroups), &key) && errno != ENOENT) {
    const int err = errno;
    map_failures_.report("scope_cgroups",
                         "cannot take cgroup " + std::to_string(cgroup_id) + " out of probe " +
                             std::to_string(probe_id) + "'s scope",
                         err);
  }
}

namespace {

mcp_prefix_key prefix_key(uint32_t probe_id, const TraceIdPrefix& prefix) {
  mcp_prefix_key key{};
  key.prefixlen = 32 + prefix.bits();
  key.probe_id = probe_id;
  std::copy(prefix.bytes.begin(), prefix.bytes.end(), key.id);
  return key;
}

}  // namespace

void BpfSession::put_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix, uint32_t slot, uint64_t threshold) {
  const mcp_prefix_key key = prefix_key(probe_id, prefix);
  const mcp_prefix_rule rule{threshold, slot, 0};
  if (map_io_->update(bpf_map__fd(skel()->maps.trace_prefixes), &key, &rule, BPF_ANY))
    throw runtime_error("cannot add trace-id prefix " + prefix.digits + " (at most " +
                        std::to_string(MCP_MAX_TRACE_PREFIXES - 1) + " prefix rules): " + errno_text(errno));
}

void BpfSession::erase_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix) {
  const mcp_prefix_key key = prefix_key(probe_id, prefix);
  // ENOENT: already gone. Another failure leaves the rule deciding: counted.
  if (map_io_->erase(bpf_map__fd(skel()->maps.trace_prefixes), &key) && errno != ENOENT) {
    const int err = errno;
    map_failures_.report("trace_prefixes",
                         "cannot remove trace-id prefix " + prefix.digits + " of probe " + std::to_string(probe_id),
                         err);
  }
}

void BpfSession::clear_prefix_counters(uint32_t slot) {
  std::vector<mcp_counters> zeros(ncpus_, mcp_counters{});
  // Not zeroed, the slot's next rule starts from its last one's counts: counted (the control
  // loop goes on with the rule).
  if (map_io_->update(bpf_map__fd(skel()->maps.prefix_counters), &slot, zeros.data(), BPF_ANY)) {
    const int err = errno;
    map_failures_.report("prefix_counters", "cannot zero slot " + std::to_string(slot), err);
  }
}

ProbeCounters BpfSession::prefix_counters(uint32_t slot) const {
  return read_counters(skel()->maps.prefix_counters, slot);
}

void BpfSession::configure(uint32_t id, const ProbeConfig& config) {
  mcp_probe_config value{};
  value.threshold = config.threshold;
  value.trace_id_arg = config.trace_id_arg >= 0 ? static_cast<uint8_t>(config.trace_id_arg + 1) : 0;
  value.trace_id_format = config.trace_id_integer   ? MCP_TRACE_ID_INTEGER
                          : config.trace_id_bytes16 ? MCP_TRACE_ID_BYTES16
                                                    : MCP_TRACE_ID_HEX32;
  value.cgroup_id = config.scoped ? MCP_CGROUP_SCOPE_SET : 0;
  value.cuda_api = config.cuda_api;
  value.vma_arg = config.vma_arg;
  value.entry_deref_arg = config.entry_deref_arg;
  value.ret_deref_arg = config.ret_deref_arg;
  value.cuda_flags = config.cuda_flags;
  value.name_arg = config.name_arg;
  value.string_args = config.string_args;
  value.stack = config.stack;
  if (map_io_->update(bpf_map__fd(skel()->maps.probe_configs), &id, &value, BPF_ANY)) {
    const int err = errno;
    throw runtime_error("cannot configure probe " + std::to_string(id) + " (map probe_configs): " + errno_text(err));
  }
  std::unique_lock lock(mu_);
  trace_id_probes_[id % MCP_MAX_PROBES] = value.trace_id_arg != 0;
}

void BpfSession::set_threshold(uint32_t id, uint64_t threshold) {
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it != probes_.end() && it->second->windows) {
      it->second->windows->rate = threshold_to_probability(threshold);
      apply_window_plan(id, *it->second->windows);
      lock.unlock();
      window_cv_.notify_all();
      return;
    }
  }
  write_threshold(id, threshold);
}

void BpfSession::write_threshold(uint32_t id, uint64_t threshold, std::optional<uint64_t> window_end_ns) {
  mcp_probe_config value{};
  const int fd = bpf_map__fd(skel()->maps.probe_configs);
  // Only this agent writes the map, and the read-modify-write keeps the rest of the probe's
  // settings (trace id, CUDA): a failed read would zero them, so it stops here.
  if (map_io_->lookup(fd, &id, &value)) {
    const int err = errno;
    throw runtime_error("cannot read probe " + std::to_string(id) + "'s configuration (map probe_configs): " +
                        errno_text(err));
  }
  value.threshold = threshold;
  if (window_end_ns) value.window_end_ns = *window_end_ns;
  if (map_io_->update(fd, &id, &value, BPF_ANY)) {
    const int err = errno;
    throw runtime_error("cannot set probe " + std::to_string(id) + "'s threshold (map probe_configs): " +
                        errno_text(err));
  }
}

uint64_t BpfSession::threshold(uint32_t id) const {
  {
    std::shared_lock lock(mu_);
    auto it = probes_.find(id);
    if (it != probes_.end() && it->second->windows) return probability_to_threshold(it->second->windows->rate);
  }
  mcp_probe_config value{};
  // Only for an id never configured (beyond probe_slots): a reader with no error channel.
  if (map_io_->lookup(bpf_map__fd(skel()->maps.probe_configs), &id, &value)) {
    const int err = errno;
    map_failures_.report("probe_configs", "cannot read probe " + std::to_string(id) + "'s threshold", err);
  }
  return value.threshold;
}

ProbeCounters BpfSession::read_counters(const bpf_map* map, uint32_t key) const {
  std::vector<mcp_counters> values(ncpus_);
  ProbeCounters out;
  if (map_io_->lookup(bpf_map__fd(map), &key, values.data()) != 0) {
    const int err = errno;
    map_failures_.report(bpf_map__name(map), "cannot read the counters at " + std::to_string(key), err);
    return out;
  }
  for (const auto& v : values) {
    out.seen += v.seen;
    out.kept += v.kept;
    out.lost += v.lost;
    out.quota_dropped += v.quota_dropped;
    out.orphaned += v.orphaned;
  }
  return out;
}

ProbeCounters BpfSession::counters(uint32_t id) const {
  ProbeCounters c = read_counters(skel()->maps.counters, id);
  std::shared_lock lock(mu_);
  if (id < MCP_MAX_PROBES) c.orphaned += swept_orphans_[id];
  return c;
}

std::vector<ProbeCounters> BpfSession::all_counters() const {
  std::vector<ProbeCounters> out(MCP_MAX_PROBES);
  // Ids are taken lowest first: reading up to the highest one in use (or quarantined) copies
  // what a few probes use, not the whole per-CPU array, each tick.
  uint32_t used = 1;
  {
    std::shared_lock lock(mu_);
    if (!probes_.empty()) used = std::max(used, probes_.rbegin()->first + 1);
    if (!quarantine_.empty()) used = std::max(used, quarantine_.rbegin()->first + 1);
  }
  std::vector<uint32_t> keys(used);
  std::vector<mcp_counters> values(static_cast<size_t>(used) * ncpus_);
  uint32_t count = used, out_batch = 0;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  const int err = bpf_map_lookup_batch(bpf_map__fd(skel()->maps.counters), nullptr, &out_batch, keys.data(),
                                       values.data(), &count, &opts);
  if (err && errno != ENOENT) {
    for (uint32_t id = 0; id < used; id++) out[id] = counters(id);  // no batch ops: one by one
    return out;
  }
  for (uint32_t i = 0; i < count; i++) {
    if (keys[i] >= MCP_MAX_PROBES) continue;
    ProbeCounters& c = out[keys[i]];
    for (int cpu = 0; cpu < ncpus_; cpu++) {
      const auto& v = values[static_cast<size_t>(i) * ncpus_ + cpu];
      c.seen += v.seen;
      c.kept += v.kept;
      c.lost += v.lost;
      c.quota_dropped += v.quota_dropped;
      c.orphaned += v.orphaned;
    }
  }
  std::shared_lock lock(mu_);
  for (uint32_t id = 0; id < MCP_MAX_PROBES; id++) out[id].orphaned += swept_orphans_[id];
  return out;
}

ProbeCounters BpfSession::tenant_counters(uint32_t bucket) const {
  return read_counters(skel()->maps.tenant_counters, bucket);
}

void BpfSession::set_quota(uint32_t bucket, double rate_per_sec, uint64_t burst,
                           const std::vector<double>& cpu_shares) {
  if (bucket >= MCP_TENANT_BUCKETS) throw usage_error("tenant bucket out of range");
  // Each CPU refills its own bucket at its share of the rate: no shared writes.
  constexpr double kMaxRateMilli = 1.8e9;  // keeps the kernel's refill product in 64 bits
  std::vector<mcp_quota_config> values(ncpus_);
  for (int cpu = 0; cpu < ncpus_; cpu++) {
    const double share = cpu_shares.size() == static_cast<size_t>(ncpus_) ? cpu_shares[cpu] : 1.0 / ncpus_;
    if (burst == 0) continue;
    values[cpu].rate_milli = static_cast<uint64_t>(std::min(kMaxRateMilli, rate_per_sec * share * 1000.0));
    // The rate is split, the burst is not: a tenant that moves to a CPU with a small
    // share finds up to a whole burst saved there and is not cut off before the next
    // re-split. The price is bounded: a burst at most once per CPU.
    values[cpu].burst_milli = std::max<uint64_t>(1000, burst * 1000);
  }
  if (map_io_->update(bpf_map__fd(skel()->maps.quota_configs), &bucket, values.data(), BPF_ANY)) {
    const int err = errno;
    throw runtime_error("cannot set tenant bucket " + std::to_string(bucket) + "'s quota (map quota_configs): " +
                        errno_text(err));
  }
}

std::vector<uint64_t> BpfSession::tenant_demand_per_cpu(uint32_t bucket) const {
  std::vector<uint64_t> out(ncpus_, 0);
  std::vector<mcp_counters> values(ncpus_);
  if (map_io_->lookup(bpf_map__fd(skel()->maps.tenant_counters), &bucket, values.data()) != 0) {
    const int err = errno;
    map_failures_.report("tenant_counters", "cannot read tenant bucket " + std::to_string(bucket) + "'s demand", err);
    return out;
  }
  for (int i = 0; i < ncpus_; i++) out[i] = values[i].kept + values[i].quota_dropped;
  return out;
}

}  // namespace mcp::loader
