#include "daemon/probe_set.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/error.h"
#include "control/tenant_quota.h"
#include "cli/cuda_attach.h"
#include "loader/target_resolver.h"

namespace mcp::daemon {
namespace fs = std::filesystem;

uint64_t selector_cgroup_id(const config::Selector& selector) {
  if (selector.empty()) return 0;
  const fs::path root = control::find_cgroup2_mount();
  if (!selector.cgroup_path.empty()) return control::resolve_cgroup_id(selector.cgroup_path, root);
  // Runtimes name a container's cgroup after its id (docker-<id>.scope, cri-containerd-<id>.scope, <id>).
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() > 8) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory(ec) && it->path().filename().string().find(selector.container_id) != std::string::npos) {
      struct stat st;
      if (stat(it->path().c_str(), &st) == 0) return st.st_ino;
    }
  }
  throw runtime_error("no cgroup found for container " + selector.container_id);
}

loader::ProbeConfig ProbeSet::base_config(const config::ProbeSpec& spec) const {
  loader::ProbeConfig c;
  // Steered probes start at rate 1 and the controller takes them from there.
  c.threshold = probability_to_threshold(spec.sampling.rate.value_or(1.0));
  if (spec.trace_id && spec.sampling.consistent) {
    c.trace_id_arg = spec.trace_id->index;
    c.trace_id_bytes16 = spec.trace_id->format == config::TraceIdArg::Format::kBytes16;
    c.trace_id_integer = spec.trace_id->format == config::TraceIdArg::Format::kInteger;
  }
  c.cgroup_id = selector_cgroup_id(spec.selector);
  return c;
}

void ProbeSet::attach(const config::ProbeSpec& spec) {
  const loader::ProbeConfig base = base_config(spec);
  std::vector<uint32_t> ids;
  auto meta = std::make_shared<ProbeMeta>(ProbeMeta{spec.service, spec.tags, {}});
  switch (spec.kind) {
    case config::ProbeKind::kUprobe: {
      const auto target = loader::resolve_uprobe(spec.target + ":" + spec.symbol, 0);
      ids.push_back(session_.add_uprobe(target, spec.latency, -1, base));
      break;
    }
    case config::ProbeKind::kSyscall:
      ids.push_back(session_.add_syscall(spec.target, base));
      break;
    case config::ProbeKind::kCuda: {
      const std::string file = loader::resolve_binary(spec.target, 0);
      for (const auto& p : cli::attach_cuda_file(session_, file, -1, base, symbolizer_)) {
        auto m = std::make_shared<ProbeMeta>(*meta);
        m->cuda_api = p.api->display;
        meta_[p.id % MCP_MAX_PROBES].store(std::move(m), std::memory_order_release);
        if (!p.api->internal) ids.push_back(p.id);
        else attached_[spec.key() + "#internal"].push_back(p.id);
      }
      break;
    }
  }
  for (uint32_t id : ids) {
    if (spec.kind != config::ProbeKind::kCuda) meta_[id % MCP_MAX_PROBES].store(meta, std::memory_order_release);
    tune(id, spec);
  }
  attached_[spec.key()] = std::move(ids);
}

void ProbeSet::detach(const config::ProbeSpec& spec) {
  for (const std::string& key : {spec.key(), spec.key() + "#internal"}) {
    auto it = attached_.find(key);
    if (it == attached_.end()) continue;
    for (uint32_t id : it->second) {
      control_.forget(id);
      session_.remove_probe(id);
      meta_[id % MCP_MAX_PROBES].store(nullptr, std::memory_order_release);
    }
    attached_.erase(it);
  }
}

void ProbeSet::tune(uint32_t id, const config::ProbeSpec& spec) {
  if (spec.sampling.target_qps) control_.set_target(id, *spec.sampling.target_qps);
  else control_.set_fixed_rate(id, spec.sampling.rate.value_or(1.0));
}

void ProbeSet::retune(const config::ProbeSpec& spec) {
  auto it = attached_.find(spec.key());
  if (it == attached_.end()) return;
  for (uint32_t id : it->second) {
    auto old = meta(id);
    auto m = std::make_shared<ProbeMeta>(ProbeMeta{spec.service, spec.tags, old ? old->cuda_api : ""});
    meta_[id % MCP_MAX_PROBES].store(std::move(m), std::memory_order_release);
    tune(id, spec);
  }
}

void ProbeSet::apply_services(const config::Config& cfg) {
  for (const auto& strategy : cfg.services) {
    // Probes of this service by version, then each version's target split evenly over them.
    std::map<std::string, std::vector<uint32_t>> by_version;
    for (const auto& spec : cfg.probes) {
      if (spec.service != strategy.service) continue;
      auto it = attached_.find(spec.key());
      if (it == attached_.end()) continue;
      for (const auto& [k, v] : spec.tags)
        if (k == "version") by_version[v].insert(by_version[v].end(), it->second.begin(), it->second.end());
    }
    for (const auto& vt : cfg.version_targets(strategy.service)) {
      const auto& ids = by_version[vt.version];
      for (uint32_t id : ids) control_.set_target(id, vt.target_qps / static_cast<double>(ids.size()));
      if (ids.empty())
        spdlog::warn("service {}: no probe tagged version={} for its {}% share", strategy.service, vt.version,
                     vt.target_qps);
    }
  }
}

}  // namespace mcp::daemon
