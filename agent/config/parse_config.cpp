// agent.yaml → Config: parse_config() reads the top-level mapping and hands each section to
// its reader (sections.h), all through the schema walker in yaml_reader.h, then checks what
// spans sections. Problems are collected, not thrown one by one, so an operator sees all of
// them in one run.
#include "config/parse_config.h"

#include "config/file_trust.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/agent_id_rule.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "mcp_abi.h"

namespace mcp::config {

using yaml::Ctx;
using yaml::MapReader;
using yaml::check_single_document;
using yaml::kind_name;
using yaml::pos_of;
using yaml::read_file;
using yaml::read_integer;
using yaml::read_string;
using yaml::valid_endpoint;

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : mcp::Error(ExitCode::kUsage, diagnostics.empty() ? "invalid configuration" : diagnostics.front().str()),
      diagnostics_(std::move(diagnostics)) {}

namespace {

void check_cross_references(Ctx& ctx, Config& cfg) {
  // Probes with the same attachment would double-count every event.
  for (size_t i = 0; i < cfg.probes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (cfg.probes[i].key() == cfg.probes[j].key()) {
        ctx.error(cfg.probes[i].pos, "duplicate probe '" + cfg.probes[i].key() + "' (first at line " +
                                         std::to_string(cfg.probes[j].pos.line) + ")");
        break;
      }
    }
  }
  for (const auto& s : cfg.services) {
    if (!s.target_qps && cfg.version_targets(s.service).empty())
      ctx.error(s.pos, "service '" + s.service +
                           "' has weights but no target: set target_qps here or sampling.target_qps on its probes");
  }
}

}  // namespace

std::string ProbeSpec::key() const {
  std::string k;
  switch (kind) {
    case ProbeKind::kUprobe: k = (target_is_library ? "uprobe:lib:" : "uprobe:") + target + ":" + symbol; break;
    case ProbeKind::kSyscall: k = "syscall:" + target; break;
    case ProbeKind::kCuda: k = "cuda:" + target; break;
    case ProbeKind::kUsdt: k = (target_is_library ? "usdt:lib:" : "usdt:") + target + ":" + symbol; break;
  }
  if (!selector.container_id.empty()) k += "@container=" + selector.container_id;
  if (!selector.cgroup_path.empty()) k += "@cgroup=" + selector.cgroup_path;
  if (selector.pods) k += "@" + selector.pods->text();
  if (container) {
    if (!container->pod.empty()) k += "@in-pod=" + container->ns + "/" + container->pod;
    else if (!container->ns.empty()) k += "@in-namespace=" + container->ns;
    else k += "@in-containers";
  }
  return k;
}

const ServiceStrategy* Config::find_service(std::string_view name) const {
  for (const auto& s : services)
    if (s.service == name) return &s;
  return nullptr;
}

std::vector<VersionTarget> Config::version_targets(std::string_view service) const {
  const ServiceStrategy* s = find_service(service);
  if (!s) return {};
  double total = s->target_qps.value_or(0);
  if (!s->target_qps)
    for (const auto& p : probes)
      if (p.service == service && p.sampling.target_qps) total += *p.sampling.target_qps;
  if (!(total > 0)) return {};
  std::vector<VersionTarget> out;
  for (const auto& [version, pct] : s->weights) out.push_back({version, total * pct / 100.0});
  return out;
}

Config parse_config(std::string_view yaml, const std::string& file, const std::filesystem::path& base_dir) {
  Ctx ctx(file, yaml);
  Config cfg;
  cfg.path = file;
  YAML::Node root;
  try {
    if (auto problem = check_single_document(yaml)) {
      ctx.error(problem->first, problem->second);
      throw ConfigError(std::move(ctx.diagnostics()));
    }
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    ctx.error(pos_of(e.mark), "YAML syntax: " + e.msg);
    throw ConfigError(std::move(ctx.diagnostics()));
  }
  if (root.IsNull()) {
    ctx.error(Position{1, 1}, "empty configuration (expected a mapping with probes, broker, ...)");
    throw ConfigError(std::move(ctx.diagnostics()));
  }
  MapReader top(ctx, root, "agent.yaml",
                {"version", "node_name", "broker", "probes", "syscalls", "cuda", "quotas", "exporter",
                 "services", "compliance", "metrics", "ready_file", "kubernetes"});
  if (top.valid()) {
    if (top.has("version")) {
      auto v = read_integer(ctx, top.get("version"), "version");
      if (v && *v != 1) ctx.error(top.get("version"), "unsupported version " + std::to_string(*v) + " (this agent reads version 1)");
    }
    if (top.has("node_name"))
      if (auto s = read_string(ctx, top.get("node_name"), "node_name", true)) {
        // The node name is the agent id the broker sees: one it would refuse loses every batch.
        if (const auto why = agent_id_problem(*s); why && !s->empty())
          ctx.error(top.get("node_name"), "node_name '" + *s + "' cannot be an agent id: " + *why);
        else
          cfg.node_name = *s;
      }
    if (top.has("ready_file"))  // relative: to the file's directory, as compliance.file
      if (auto s = read_string(ctx, top.get("ready_file"), "ready_file"); s && !s->empty())
        cfg.ready_file = (s->front() == '/' ? std::filesystem::path(*s) : base_dir / *s).string();
    if (top.has("broker")) read_broker(ctx, top.get("broker"), cfg.broker);
    if (top.has("probes")) {
      const YAML::Node p = top.get("probes");
      if (!p.IsSequence()) ctx.error(p, "probes must be a list, found " + std::string(kind_name(p)));
      else for (const auto& item : p) read_uprobe(ctx, item, cfg.probes);
    }
    if (top.has("syscalls")) {
      const YAML::Node s = top.get("syscalls");
      if (!s.IsSequence()) ctx.error(s, "syscalls must be a list of names, found " + std::string(kind_name(s)));
      else for (const auto& item : s) read_syscall(ctx, item, cfg.probes);
    }
    // Each uprobe and syscall takes one of the kernel's probe slots, twice during a reload
    // that replaces it: `run` would refuse the rest only once it has attached the first ones.
    if (cfg.probes.size() > MCP_MAX_CONFIGURED_PROBES)
      ctx.error(top.has("probes") ? top.get("probes") : top.get("syscalls"),
                std::to_string(cfg.probes.size()) + " probes and syscalls: at most " +
                    std::to_string(MCP_MAX_CONFIGURED_PROBES) + " (a reload stages the new beside the old)");
    if (top.has("cuda")) read_cuda(ctx, top.get("cuda"), cfg);
    if (top.has("quotas")) read_quotas(ctx, top.get("quotas"), cfg.quotas);
    if (top.has("exporter")) read_exporter(ctx, top.get("exporter"), base_dir, cfg);
    if (top.has("services")) {
      const YAML::Node s = top.get("services");
      if (!s.IsSequence()) ctx.error(s, "services must be a list, found " + std::string(kind_name(s)));
      else for (const auto& item : s) read_service(ctx, item, cfg.services);
    }
    if (top.has("compliance")) read_compliance(ctx, top.get("compliance"), base_dir, cfg.compliance);
    if (top.has("kubernetes")) read_kubernetes(ctx, top.get("kubernetes"), base_dir, cfg.kubernetes);
    if (!cfg.kubernetes.pod_names)
      for (const auto& [pos, what] : ctx.pod_refs)
        ctx.error(pos, what + " needs the pod watch, which kubernetes.pod_names: false turns off");
    if (top.has("metrics")) {
      MapReader m(ctx, top.get("metrics"), "metrics", {"listen"});
      if (m.valid() && m.has("listen")) {
        if (auto s = read_string(ctx, m.get("listen"), "metrics.listen")) {
          if (!valid_endpoint(*s, false, true)) ctx.error(m.get("listen"), "metrics.listen '" + *s + "' is not host:port");
          else cfg.metrics_listen = *s;
        }
      }
    }
  }
  if (ctx.ok()) check_cross_references(ctx, cfg);
  if (!ctx.ok()) {
    auto& d = ctx.diagnostics();
    const std::string& self = ctx.file();
    std::stable_sort(d.begin(), d.end(), [&](const Diagnostic& a, const Diagnostic& b) {
      return std::make_tuple(a.file != self, a.file, a.line, a.column) <
             std::make_tuple(b.file != self, b.file, b.line, b.column);
    });
    throw ConfigError(std::move(d));
  }
  if (!cfg.compliance.rules) cfg.compliance.rules = std::make_shared<const rules::RuleSet>();
  return cfg;
}

Config load_config(const std::filesystem::path& path) {
  if (std::string why = untrusted_reason(path); !why.empty())
    throw ConfigError({Diagnostic{path.string(), 0, 0, why}});
  std::string err;
  const std::string text = read_file(path, err);
  if (!err.empty()) throw ConfigError({Diagnostic{path.string(), 0, 0, err}});
  return parse_config(text, path.string(), path.parent_path());
}

}  // namespace mcp::config
