// agent.yaml's limits and node integration: `cuda:` (which CUDA launches are probed),
// `quotas:` (events per second per tenant) and `kubernetes:` (the pod watch).
#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/duration.h"
#include "common/error.h"
#include "config/sections.h"
#include "config/yaml_reader.h"

namespace mcp::config {

using yaml::Ctx;
using yaml::MapReader;
using yaml::pos_of;
using yaml::read_bool;
using yaml::read_number;
using yaml::read_string;
using yaml::read_string_list;

void read_cuda(Ctx& ctx, const YAML::Node& n, Config& cfg) {
  MapReader m(ctx, n, "cuda", {"enabled", "libs", "latency", "slow_launch", "sampling", "service", "tags"});
  if (!m.valid()) return;
  CudaConfig& c = cfg.cuda;
  if (m.has("enabled")) if (auto b = read_bool(ctx, m.get("enabled"), "cuda.enabled")) c.enabled = *b;
  if (m.has("libs")) {
    c.libs = read_string_list(ctx, m.get("libs"), "cuda.libs");
    if (m.get("libs").IsSequence() && m.get("libs").size() == 0) ctx.error(m.get("libs"), "cuda.libs must not be empty");
  } else {
    c.libs = {kCudaDiscover};
  }
  if (m.has("slow_launch")) {
    if (auto s = read_string(ctx, m.get("slow_launch"), "cuda.slow_launch")) {
      try {
        c.slow_launch = mcp::parse_duration(*s);
      } catch (const mcp::Error& e) {
        ctx.error(m.get("slow_launch"), std::string("cuda.slow_launch: ") + e.what());
      }
    }
  }
  if (m.has("latency")) if (auto b = read_bool(ctx, m.get("latency"), "cuda.latency")) c.latency = *b;
  ProbeSpec tmpl;
  tmpl.kind = ProbeKind::kCuda;
  // Slow-launch detection measures each launch's latency: it needs the return probe.
  tmpl.latency = c.latency || c.slow_launch.count() > 0;
  tmpl.pos = pos_of(n.Mark());
  if (m.has("sampling")) read_sampling(ctx, m.get("sampling"), c.sampling);
  tmpl.sampling = c.sampling;
  if (m.has("service")) if (auto s = read_string(ctx, m.get("service"), "service")) tmpl.service = *s;
  if (m.has("tags")) read_tags(ctx, m.get("tags"), tmpl.tags);
  if (c.enabled) {
    for (const auto& lib : c.libs) {
      ProbeSpec p = tmpl;
      p.target = lib;
      cfg.probes.push_back(std::move(p));
    }
  }
}

namespace {

std::optional<TenantQuota> read_quota(Ctx& ctx, const YAML::Node& n, bool tenant) {
  MapReader m(ctx, n, tenant ? "tenant quota" : "default quota",
              tenant ? std::initializer_list<std::string_view>{"cgroup_path", "pod", "namespace", "rate", "burst"}
                     : std::initializer_list<std::string_view>{"rate", "burst"});
  if (!m.valid()) return std::nullopt;
  const size_t before = ctx.diagnostics().size();
  TenantQuota q;
  q.pos = pos_of(n.Mark());
  if (tenant && (m.has("pod") || m.has("namespace"))) {
    q.pods = read_pod_ref(ctx, n, m, "tenant", {"cgroup_path"});
    if (q.pods) q.cgroup_path = q.pods->text();
  } else if (tenant) {
    if (!m.has("cgroup_path")) ctx.error(n, "a tenant quota needs 'cgroup_path', 'pod' or 'namespace'");
    else if (auto s = read_string(ctx, m.get("cgroup_path"), "cgroup_path")) {
      if (s->front() != '/') ctx.error(m.get("cgroup_path"), "cgroup_path must start with '/'");
      q.cgroup_path = *s;
    }
  }
  if (!m.has("rate")) ctx.error(n, "a quota needs 'rate' (events per second)");
  else if (auto r = read_number(ctx, m.get("rate"), "quota rate")) {
    if (!(*r > 0)) ctx.error(m.get("rate"), "quota rate must be greater than 0");
    q.rate = *r;
  }
  if (!m.has("burst")) {
    q.burst = q.rate;
  } else if (auto b = read_number(ctx, m.get("burst"), "quota burst")) {
    if (!(*b >= 1)) ctx.error(m.get("burst"), "quota burst must be at least 1");
    q.burst = *b;
  }
  if (ctx.diagnostics().size() != before) return std::nullopt;
  return q;
}

}  // namespace

void read_quotas(Ctx& ctx, const YAML::Node& n, QuotaConfig& out) {
  MapReader m(ctx, n, "quotas", {"default", "tenants"});
  if (!m.valid()) return;
  if (m.has("default")) out.default_quota = read_quota(ctx, m.get("default"), false);
  if (m.has("tenants")) {
    const YAML::Node t = m.get("tenants");
    if (!t.IsSequence()) {
      ctx.error(t, "quotas.tenants must be a list");
      return;
    }
    for (const auto& item : t) {
      auto q = read_quota(ctx, item, true);
      if (!q) continue;
      auto dup = std::find_if(out.tenants.begin(), out.tenants.end(),
                              [&](const TenantQuota& o) { return o.cgroup_path == q->cgroup_path; });
      if (dup != out.tenants.end()) {
        ctx.error(item, "duplicate quota for '" + q->cgroup_path + "' (first at line " + std::to_string(dup->pos.line) + ")");
        continue;
      }
      out.tenants.push_back(*q);
    }
  }
}

void read_kubernetes(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, KubernetesConfig& out) {
  MapReader m(ctx, n, "kubernetes", {"pod_names", "api_server", "token_file", "ca_file", "pod_labels"});
  if (!m.valid()) return;
  if (m.has("pod_names"))
    if (auto b = read_bool(ctx, m.get("pod_names"), "kubernetes.pod_names")) out.pod_names = *b;
  if (m.has("api_server")) {
    if (auto s = read_string(ctx, m.get("api_server"), "kubernetes.api_server")) {
      if (!s->starts_with("https://")) ctx.error(m.get("api_server"), "kubernetes.api_server must be an https:// URL, found '" + *s + "'");
      else out.api_server = *s;
    }
  }
  // Relative files: to the configuration's directory, as ready_file.
  auto file = [&](const char* key, std::string& into) {
    if (!m.has(key)) return;
    if (auto s = read_string(ctx, m.get(key), std::string("kubernetes.") + key))
      into = (s->front() == '/' ? std::filesystem::path(*s) : base_dir / *s).string();
  };
  file("token_file", out.token_file);
  file("ca_file", out.ca_file);
  if (m.has("pod_labels")) out.pod_labels = read_string_list(ctx, m.get("pod_labels"), "kubernetes.pod_labels");
}

}  // namespace mcp::config
