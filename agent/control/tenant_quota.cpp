#include "control/tenant_quota.h"

#include <charconv>
#include <cmath>

#include "cgroup/cgroup2.h"
#include "common/error.h"
#include "common/setting_names.h"

namespace mcp::control {

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = kFnv1a64Offset;
  for (const uint8_t b : bytes) {
    h ^= b;
    h *= kFnv1a64Prime;
  }
  return h;
}

uint64_t cgroup_id_hash(uint64_t cgroup_id) {
  std::array<uint8_t, 8> le{};
  for (std::size_t i = 0; i < le.size(); ++i) le[i] = static_cast<uint8_t>(cgroup_id >> (8 * i));
  return fnv1a64(le);
}

uint32_t tenant_bucket(uint64_t cgroup_id) {
  return static_cast<uint32_t>(cgroup_id_hash(cgroup_id) % kTenantBuckets);
}

namespace {

bool parse_number(std::string_view text, double& out) {
  const auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), out, std::chars_format::fixed);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

bool parse_number(std::string_view text, uint64_t& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

Quota parse_quota_or_throw(std::string_view text, std::string_view flag_text) {
  const auto bad = [&](const std::string& why) {
    return usage_error(setting_name(Setting::kTenantQuota) + " '" + std::string(flag_text) + "': " + why);
  };
  Quota q;
  std::string_view rate = text;
  std::string_view burst;
  const auto colon = text.find(':');
  if (colon != std::string_view::npos) {
    rate = text.substr(0, colon);
    burst = text.substr(colon + 1);
    if (burst.empty()) throw bad("empty BURST after ':'");
  }
  if (!parse_number(rate, q.rate_per_s) || !std::isfinite(q.rate_per_s) || q.rate_per_s < 0) {
    throw bad("RATE must be a number of events per second >= 0");
  }
  if (colon != std::string_view::npos) {
    if (!parse_number(burst, q.burst) || q.burst == 0) {
      throw bad("BURST must be a whole number of events >= 1");
    }
  } else {
    q.burst = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q.rate_per_s)));
  }
  return q;
}

}  // namespace

Quota parse_quota(std::string_view text) { return parse_quota_or_throw(text, text); }

uint64_t pod_ref_tenant_id(const k8s::PodRef& ref) {
  const std::string t = ref.text();
  return fnv1a64({reinterpret_cast<const uint8_t*>(t.data()), t.size()}) | (1ULL << 63);
}

TenantQuotaSpec parse_tenant_quota(std::string_view text) {
  const auto eq = text.rfind('=');
  if (eq == std::string_view::npos) {
    throw usage_error(setting_name(Setting::kTenantQuota) + " '" + std::string(text) +
                      "': expected CGROUP_PATH=RATE[:BURST]");
  }
  TenantQuotaSpec spec;
  spec.cgroup_path = std::string(text.substr(0, eq));
  if (spec.cgroup_path.empty()) {
    throw usage_error(setting_name(Setting::kTenantQuota) + " '" + std::string(text) + "': empty CGROUP_PATH");
  }
  spec.quota = parse_quota_or_throw(text.substr(eq + 1), text);
  for (const std::string_view kind : {"pod", "namespace"}) {
    const std::string prefix = std::string(kind) + ":";
    if (!spec.cgroup_path.starts_with(prefix)) continue;
    std::string why;
    spec.pods = k8s::parse_pod_ref(kind, std::string_view(spec.cgroup_path).substr(prefix.size()), &why);
    if (!spec.pods) throw usage_error(setting_name(Setting::kTenantQuota) + " '" + std::string(text) + "': " + why);
    spec.cgroup_path = spec.pods->text();
  }
  return spec;
}

TenantQuotaTable build_tenant_quota_table(std::span<const TenantQuotaSpec> specs,
                                          const Quota& default_quota,
                                          const std::filesystem::path& cgroup2_root) {
  TenantQuotaTable table;
  table.buckets.fill(default_quota);
  for (const TenantQuotaSpec& spec : specs) {
    ResolvedTenant t;
    t.cgroup_path = spec.cgroup_path;
    t.quota = spec.quota;
    if (spec.pods) {
      t.pods = spec.pods;
      t.cgroup_path = spec.pods->text();
      t.tenant_id = pod_ref_tenant_id(*spec.pods);
    } else {
      t.cgroup_id = t.tenant_id = cgroup::resolve_cgroup_id(spec.cgroup_path, cgroup2_root);
      t.depth = cgroup::cgroup_depth(spec.cgroup_path, cgroup2_root);
    }
    t.bucket = tenant_bucket(t.tenant_id);
    ResolvedTenant* same = nullptr;
    for (ResolvedTenant& prev : table.tenants) {
      if (prev.tenant_id == t.tenant_id) same = &prev;
    }
    if (same != nullptr) {
      table.warnings.push_back(t.pods ? "tenant quota for '" + t.cgroup_path + "' given twice; the later wins"
                                      : "tenant quota for cgroup '" + t.cgroup_path + "' (id " +
                                            std::to_string(t.cgroup_id) + ") given twice; the later wins");
      *same = t;
    } else {
      for (const ResolvedTenant& prev : table.tenants) {
        if (prev.bucket == t.bucket) {
          table.warnings.push_back("tenants '" + prev.cgroup_path + "' and '" + t.cgroup_path +
                                   "' share tenant bucket " + std::to_string(t.bucket) +
                                   ", so one quota; the later one's applies");
        }
      }
      table.tenants.push_back(t);
    }
    table.buckets[t.bucket] = t.quota;
    table.configured[t.bucket] = true;
  }
  // Tenants sharing a bucket report the quota actually in force.
  for (ResolvedTenant& t : table.tenants) t.quota = table.buckets[t.bucket];
  return table;
}

}  // namespace mcp::control
