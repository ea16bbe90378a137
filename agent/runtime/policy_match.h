// Which probes a broker policy applies to on this agent. Pure: unit-tested on its own.
//   probe:          empty: every probe; else the probe's name or symbol.
//   service:        empty: every service; else the probe's service (its labels', or the run's
//                   --service for a probe without labels). A probe of no known service at all
//                   takes every policy, as before services were matched per probe.
//   service_labels: every pair among the probe's tags (the tags its events carry).
//   trace_id_prefix: not matched here: a prefix policy applies to the same probes, as a prefix
//                   rule on those that decide on a trace id (runtime/control_loop.h ProbePolicy).
#pragma once
#include <optional>
#include <string>

#include "forward/forwarder.h"
#include "loader/kernel_maps.h"
#include "enrich/probe_labels.h"

namespace mcp::runtime {

using enrich::ProbeMeta;

bool policy_applies(const PolicyUpdate& policy, const loader::ProbeInfo& probe, const ProbeMeta* meta,
                    const std::optional<std::string>& run_service);

}  // namespace mcp::runtime
