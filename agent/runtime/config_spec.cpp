#include "runtime/config_spec.h"

#include <algorithm>

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
  for (const auto& t : q.tenants) out.push_back({t.cgroup_path, quota_of(t)});
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
                                           control::find_cgroup2_mount());
}

std::optional<control::TenantQuotaTable> quota_table(const config::QuotaConfig& q) {
  return quota_table(tenant_quotas_of(q), default_quota_of(q));
}

ForwarderOptions forwarder_of(const config::BrokerConfig& broker) {
  ForwarderOptions fo;
  fo.brokers = broker.addresses;
  fo.token_file = broker.token_file;
  fo.compression = parse_compression(broker.compression);
  if (broker.tls) fo.tls = {broker.tls->ca, broker.tls->cert, broker.tls->key};
  return fo;
}

}  // namespace mcp::runtime
