#include "runtime/interval_counts.h"

namespace mcp::runtime {

IntervalCounts::IntervalCounts(size_t max_probes) : tallies_(max_probes), marks_(max_probes) {}

void IntervalCounts::on_delivered(const Event& e) {
  tallies_[e.probe_id % tallies_.size()]++;
  estimates_.on_delivered(e.probe_id, e.weight());
}

std::vector<ProbeIntervalCounts> IntervalCounts::close(const loader::KernelMaps& maps,
                                                       const std::function<std::string(uint32_t)>& service_of) {
  const auto all = maps.all_counters();
  std::vector<ProbeIntervalCounts> out;
  for (const auto& p : maps.probes()) {
    if (p.id >= all.size() || p.id >= marks_.size()) continue;
    const auto& c = all[p.id];
    estimates_.close_interval(p.id, c.kept, c.quota_dropped);
    if (p.internal) continue;
    Mark& m = marks_[p.id];
    ProbeIntervalCounts ic;
    ic.service = service_of ? service_of(p.id) : std::string();
    ic.probe = p.name;
    ic.seen = c.seen - m.counters.seen;
    ic.kept = c.kept - m.counters.kept;
    ic.lost = c.lost - m.counters.lost;
    ic.quota_dropped = c.quota_dropped - m.counters.quota_dropped;
    ic.orphaned = c.orphaned - m.counters.orphaned;
    ic.delivered = tallies_[p.id] - m.delivered;
    ic.estimate = estimates_.estimate(p.id) - m.estimate;
    m = {c, tallies_[p.id], estimates_.estimate(p.id)};
    if (ic.seen || ic.delivered || ic.orphaned) out.push_back(std::move(ic));
  }
  return out;
}

}  // namespace mcp::runtime
