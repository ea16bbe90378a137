// The data-path sections of agent.yaml as runtime settings: quotas, exporter filters,
// compliance rules, the broker and pod names. The one reading of those keys, shared by `run` and
// `trace --config` (whose flags merge into these values, see cli/trace_options.h), so the
// same key cannot mean two things. The probes of the same Config are ProbeSet's (probe_set.h).
#pragma once
#include <optional>
#include <vector>

#include "audit/audit_log.h"
#include "config/config.h"
#include "control/tenant_quota.h"
#include "forward/forwarder.h"
#include "k8s/pod_names.h"
#include "runtime/export_filter.h"

namespace mcp::runtime {

// compliance (rules), exporter.error_only and exporter.sample_rate.
ExportFilterSpec export_filter_of(const config::Config& cfg);

// quotas.tenants[] and quotas.default in the spelling of --tenant-quota / --default-quota.
std::vector<control::TenantQuotaSpec> tenant_quotas_of(const config::QuotaConfig& q);
std::optional<control::Quota> default_quota_of(const config::QuotaConfig& q);

// The kernel's quota table; none when there is no quota at all. Cgroups without a quota
// of their own and no default stay unlimited. Throws mcp::Error when a cgroup is missing.
std::optional<control::TenantQuotaTable> quota_table(const std::vector<control::TenantQuotaSpec>& tenants,
                                                     const std::optional<control::Quota>& default_quota);
std::optional<control::TenantQuotaTable> quota_table(const config::QuotaConfig& q);

// broker.addresses, token_file, tls and compression; the agent id and the spool directory
// are the front end's (a daemon's identity differs from a one-shot run's).
ForwarderOptions forwarder_of(const config::BrokerConfig& broker);

// compliance.audit_log; none without one (the node name is the runtime's).
std::optional<audit::AuditOptions> audit_options_of(const config::ComplianceConfig& c);

// kubernetes (pod names from the API server's watch; node_name picks the node); none when
// kubernetes.pod_names is false.
std::optional<k8s::PodNamesSpec> pod_names_of(const config::Config& cfg);

}  // namespace mcp::runtime
