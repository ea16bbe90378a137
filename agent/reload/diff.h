// ConfigDiff: what a reload changes, probe by probe, so the daemon touches only what moved.
// Probes are matched by ProbeSpec::key() (kind, target, symbol, selector):
//   added / removed   attach / detach. A probe whose trace_id or latency changed needs a
//                     different program, so it appears in both (removed old, added new).
//   unchanged         identical; leave it attached, its events continue without a gap.
//   sampling_changed  same attachment, new sampling: write the new rate / target to the maps.
//   metadata_changed  same attachment, new service or tags: update enrichment only.
//                     (A probe can be in both sampling_changed and metadata_changed.)
// The flags say which non-probe sections differ.
#pragma once
#include <vector>

#include "config/config.h"

namespace mcp::reload {

struct ProbeUpdate {
  config::ProbeSpec before;
  config::ProbeSpec after;
};

struct ConfigDiff {
  std::vector<config::ProbeSpec> added;
  std::vector<config::ProbeSpec> removed;
  std::vector<config::ProbeSpec> unchanged;
  std::vector<ProbeUpdate> sampling_changed;
  std::vector<ProbeUpdate> metadata_changed;
  bool node_changed = false;
  bool broker_changed = false;
  bool otlp_changed = false;           // exporter.otlp (takes effect on restart, as broker)
  bool metrics_changed = false;
  bool kubernetes_changed = false;     // the pod watch's settings (need a restart)
  bool cuda_settings_changed = false;  // slow_launch / libs / sampling of the CUDA section
  bool quotas_changed = false;
  bool exporter_changed = false;
  bool services_changed = false;       // weighted strategies: recompute per-version targets
  bool rules_changed = false;          // compliance rules source differs

  bool probes_changed() const {
    return !added.empty() || !removed.empty() || !sampling_changed.empty() || !metadata_changed.empty();
  }
  bool empty() const {
    return !probes_changed() && !node_changed && !broker_changed && !otlp_changed && !metrics_changed &&
           !kubernetes_changed && !cuda_settings_changed && !quotas_changed && !exporter_changed &&
           !services_changed && !rules_changed;
  }
};

// `before` may be an empty Config (first load: everything is added).
ConfigDiff diff(const config::Config& before, const config::Config& after);

}  // namespace mcp::reload
