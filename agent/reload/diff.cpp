#include "reload/diff.h"

#include <unordered_map>

namespace mcp::reload {

ConfigDiff diff(const config::Config& before, const config::Config& after) {
  ConfigDiff d;
  std::unordered_map<std::string, const config::ProbeSpec*> old_by_key;
  for (const auto& p : before.probes) old_by_key.emplace(p.key(), &p);
  std::unordered_map<std::string, bool> seen;
  for (const auto& p : after.probes) {
    const std::string key = p.key();
    seen[key] = true;
    auto it = old_by_key.find(key);
    if (it == old_by_key.end()) {
      d.added.push_back(p);
      continue;
    }
    const config::ProbeSpec& o = *it->second;
    if (!o.same_attachment(p)) {
      d.removed.push_back(o);
      d.added.push_back(p);
    } else if (o == p) {
      d.unchanged.push_back(p);
    } else {
      if (o.sampling != p.sampling) d.sampling_changed.push_back({o, p});
      if (o.service != p.service || o.tags != p.tags) d.metadata_changed.push_back({o, p});
    }
  }
  for (const auto& p : before.probes)
    if (!seen.count(p.key())) d.removed.push_back(p);
  d.node_changed = before.node_name != after.node_name;
  d.broker_changed = before.broker != after.broker;
  d.otlp_changed = before.otlp != after.otlp;
  d.metrics_changed = before.metrics_listen != after.metrics_listen;
  d.kubernetes_changed = before.kubernetes != after.kubernetes;
  d.cuda_settings_changed = before.cuda != after.cuda;
  d.quotas_changed = before.quotas != after.quotas;
  d.exporter_changed = before.exporter != after.exporter;
  d.services_changed = before.services != after.services;
  d.rules_changed = before.compliance.source != after.compliance.source;
  return d;
}

}  // namespace mcp::reload
