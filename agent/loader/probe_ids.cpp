// Probe ids: taken lowest first, readied before attaching, and after a probe's removal
// quarantined (not reused, its name still resolving) until the consumer has read past every
// record it could have written; its pending latency entries are swept as orphans.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common/error.h"
#include "loader/bpf_session.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {

uint32_t BpfSession::allocate_id() {
  // A removed probe's records may still sit in the ring: its id waits until the
  // consumer has read past the producer position of its detach.
  const uint64_t consumed = consumer_pos_ ? *consumer_pos_ : UINT64_MAX;
  for (uint32_t id = 1; id < probe_slots_; id++) {
    if (probes_.count(id)) continue;
    if (auto g = grouped_.find(id); g != grouped_.end()) {
      if (!g->second.expired()) continue;
      grouped_.erase(g);
    }
    auto q = quarantine_.find(id);
    if (q != quarantine_.end() && consumed < q->second) continue;
    return id;
  }
  throw runtime_error("too many probes (at most " + std::to_string(probe_slots_ - 1) + ")");
}

uint32_t BpfSession::reserve_id(const ProbeConfig& config) {
  uint32_t id;
  {
    std::unique_lock lock(mu_);
    id = allocate_id();
    quarantine_.erase(id);
    retired_names_.erase(id);
    swept_orphans_[id] = 0;
  }
  // Before attaching: a reused id starts from zero, and the first hit already sees
  // its threshold. Zeroing after attach would erase what the first hits counted.
  // Not zeroed, the new probe would report the old one's counts as its own: the add fails.
  std::vector<mcp_counters> zeros(ncpus_, mcp_counters{});
  if (map_io_->update(bpf_map__fd(skel()->maps.counters), &id, zeros.data(), BPF_ANY)) {
    const int err = errno;
    throw runtime_error("cannot zero the counters of probe id " + std::to_string(id) + " (map counters): " +
                        errno_text(err));
  }
  configure(id, config);
  return id;
}

uint32_t BpfSession::register_probe(ProbeInfo info, std::vector<Link> links, const Programs& progs, pid_t pid,
                                    const UprobeTarget& target) {
  auto p = std::make_unique<Probe>();
  p->info = std::move(info);
  p->progs = progs;
  p->pid = pid;
  const uint32_t id = p->info.id;
  std::unique_lock lock(mu_);
  if (!links.empty()) p->targets.push_back({next_target_key_++, std::move(links), target});
  names_.insert(p->info.name);
  probes_[id] = std::move(p);
  quarantine_.erase(id);
  return id;
}

void BpfSession::retire(const std::vector<uint32_t>& ids) {
  // After detaching, nothing new can be written for these ids: drop their stale pending
  // entries, and quarantine them up to the current producer position.
  for (uint32_t id : ids) sweep_pending(id);
  std::unique_lock lock(mu_);
  for (uint32_t id : ids) quarantine_[id] = producer_pos_ ? *producer_pos_ : 0;
}

void BpfSession::sweep_pending(uint32_t id, uint64_t before_ktime) {
  // Latency entries still pending once their probe is detached never return.
  const int fd = bpf_map__fd(skel()->maps.call_entries);
  std::vector<mcp_call_key> doomed;
  mcp_call_key key{}, next{};
  const mcp_call_key* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    // The value starts with the entry's ktime_ns (struct mcp_call_entry, bpf/maps.bpf.h).
    uint64_t value[16];
    // A failed lookup is an entry its return deleted meanwhile (ENOENT): nothing to sweep.
    if ((id == 0 || next.probe_id == id) &&
        (before_ktime == UINT64_MAX || (map_io_->lookup(fd, &next, value) == 0 && value[0] < before_ktime)))
      doomed.push_back(next);
    key = next;
    prev = &key;
  }
  std::unique_lock lock(mu_);
  for (const auto& k : doomed) {
    // Failing, the entry returned meanwhile (ENOENT): it is no orphan.
    if (map_io_->erase(fd, &k) == 0 && k.probe_id < MCP_MAX_PROBES) swept_orphans_[k.probe_id]++;
  }
}

}  // namespace mcp::loader
