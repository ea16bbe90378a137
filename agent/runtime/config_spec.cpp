#include "runtime/config_spec.h"

#include <algorithm>

#include "cgroup/cgroup2.h"

namespace mcp::runtime {
namespace {

control::Quota quota_of(const config::TenantQuota& t) {
  return {t.rate, static_cast<uint64_t>(std::max(1.0, t.burst))};
}

}  // namespace

ExportFilterSpec export_filter_of(const config::Config& cfg) {
  return {cfg.compliance.rules, cfg.exporter.error_only, cfg.exporter.sample_rate};
}

std::vector<control::TenantQuotaSpec> tenant_quotas_of(const config::QuotaConfig& q) {
  std::vector<control::TenantQuotaSpec> out;
  for (const auto& t : q.tenants) out.push_back({t.cgroup_path, quota_of(t), t.pods});
  return out;
}

std::optional<control::Quota> default_quota_of(const config::QuotaConfig& q) {
  if (!q.default_quota) return std::nullopt;
  return quota_of(*q.default_quota);
}

std::optional<control::TenantQuotaTable> quota_table(const std::vector<control::TenantQuotaSpec>& tenants,
                                                     const std::optional<control::Quota>& default_quota) {
  if (tenants.empty() && !default_quota) return std::nullopt;
  // burst 0: unlimited
  return control::build_tenant_quota_table(tenants, default_quota.value_or(control::Quota{0, 0}),
                                           cgroup::find_cgroup2_mount());
}

std::optional<control::TenantQuotaTable> quota_table(const config::QuotaConfig& q) {
  return quota_table(tenant_quotas_of(q), default_quota_of(q));
}

ForwarderOptions forwarder_of(const config::BrokerConfig& broker) {
  ForwarderOptions fo;
  fo.brokers = broker.addresses;
  fo.token_file = broker.token_file;
  fo.compression = parse_compression(broker.compression);
  if (broker.batch_gap) fo.batch_gap = *broker.batch_gap;
  if (broker.tls) fo.tls = {broker.tls->ca, broker.tls->cert, broker.tls->key};
  return fo;
}

std::optional<k8s::PodNamesSpec> pod_names_of(const config::Config& cfg) {
  if (!cfg.kubernetes.pod_names) return std::nullopt;
  k8s::PodNamesSpec names;
  names.api = {cfg.kubernetes.api_server, cfg.kubernetes.token_file, cfg.kubernetes.ca_file};
  names.node_name = cfg.node_name;  // empty: $NODE_NAME
  names.labels = cfg.kubernetes.pod_labels;
  return names;
}

std::optional<audit::AuditOptions> audit_options_of(const config::ComplianceConfig& c) {
  if (!c.audit_log) return std::nullopt;
  return audit::AuditOptions{c.audit_log->dir, c.audit_log->max_bytes, c.audit_log->max_age, "", c.audit_log->key,
                             c.audit_log->max_files, c.audit_log->seal_every};
}

}  // namespace mcp::runtime
