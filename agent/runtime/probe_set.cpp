#include "runtime/probe_set.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <dirent.h>

#include <filesystem>
#include <set>

#include "common/error.h"
#include "control/tenant_quota.h"
#include "cuda/cuda_attach.h"
#include "loader/proc_maps.h"
#include "loader/target_resolver.h"

namespace mcp::runtime {
namespace fs = std::filesystem;

uint64_t selector_cgroup_id(const config::Selector& selector) {
  if (selector.empty() || selector.pods) return 0;  // pods: the control loop follows their cgroups
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

const char* state_name(ProbeState s) {
  switch (s) {
    case ProbeState::kWaiting: return "waiting";
    case ProbeState::kAttached: return "attached";
    case ProbeState::kFailed: return "failed";
  }
  return "unknown";
}

namespace {

std::string display_name(const config::ProbeSpec& spec) {
  switch (spec.kind) {
    case config::ProbeKind::kUprobe:
      if (spec.container)
        return spec.target + ":" + spec.symbol + " in " + (spec.container->any() ? "containers" : spec.container->describe());
      return spec.target + ":" + spec.symbol;
    case config::ProbeKind::kSyscall: return "syscall:" + spec.target;
    case config::ProbeKind::kCuda: return "cuda:" + spec.target;
  }
  return spec.target;
}

bool is_path(const std::string& target) { return target.find('/') != std::string::npos; }

// Library names resolve through the linker cache, which ldconfig rewrites (a new file)
// whenever a package installs a library: re-resolve only when it changed.
uint64_t linker_cache_stamp() {
  struct stat st;
  if (stat("/etc/ld.so.cache", &st) != 0) return 1;
  return static_cast<uint64_t>(st.st_ino) * 1000003u ^ static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000007u ^
         static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// Inodes of every file some process maps. Matched on the inode number alone: the device
// number /proc/PID/maps shows can differ from stat's on overlay and btrfs, and a false
// match only keeps an old attachment a little longer.
std::set<uint64_t> mapped_inodes() {
  std::set<uint64_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    for (const auto& m : loader::read_proc_maps(static_cast<pid_t>(std::atol(e->d_name)))) out.insert(m.inode);
  }
  closedir(d);
  return out;
}

}  // namespace

void ProbeSet::Handle::release() {
  if (!set_) return;
  const uint32_t id = attachment_.id();
  set_->control_.forget(id);
  set_->meta_[id % MCP_MAX_PROBES].store(nullptr, std::memory_order_release);
  set_ = nullptr;
  attachment_.reset();
}

ProbeSet::~ProbeSet() {
  std::lock_guard lock(mu_);
  entries_.clear();  // before meta_ goes: the handles clear their slots
}

loader::ProbeConfig ProbeSet::base_config(const config::ProbeSpec& spec) const {
  loader::ProbeConfig c;
  // Steered probes start at rate 1 and the controller takes them from there.
  c.threshold = probability_to_threshold(spec.sampling.rate.value_or(1.0));
  if (spec.trace_id && spec.sampling.consistent) {
    c.trace_id_arg = spec.trace_id->arg_index;
    c.trace_id_bytes16 = spec.trace_id->format == control::TraceIdFormat::kBytes16;
    c.trace_id_integer = spec.trace_id->format == control::TraceIdFormat::kU64;
  }
  // Its cgroups come from the control loop (try_attach, ContainerProbe).
  c.scoped = !spec.selector.empty() || spec.container.has_value();
  return c;
}

void ProbeSet::set_state(Entry& e, ProbeState s, std::string detail) {
  if (s == e.state && detail == e.detail) return;
  e.state = s;
  e.detail = std::move(detail);
  switch (s) {
    case ProbeState::kWaiting:
      if (e.containers) spdlog::warn("probe {} waiting: {}", e.name, e.detail);
      else spdlog::warn("probe {} waiting: {}; it attaches when the file appears", e.name, e.detail);
      break;
    case ProbeState::kAttached:
      spdlog::info("probe {} attached{}", e.name, e.watch_path.empty() ? "" : " to " + e.watch_path);
      break;
    case ProbeState::kFailed:
      spdlog::error("probe {} failed: {}", e.name, e.detail);
      break;
  }
}

void ProbeSet::try_attach(Entry& e) {
  const config::ProbeSpec& spec = e.spec;
  const loader::ProbeConfig base = base_config(spec);
  const uint64_t selector_cgroup = selector_cgroup_id(spec.selector);  // throws for a missing one
  auto meta = std::make_shared<ProbeMeta>(ProbeMeta{spec.service, spec.tags, {}});
  auto add = [&](uint32_t id, std::shared_ptr<const ProbeMeta> m, bool tuned) {
    e.handles.emplace_back(*this, id);
    // A scoped probe sees nothing until the control loop writes its cgroups (a container
    // probe's: ContainerProbe, as its containers come).
    if (spec.selector.pods) control_.set_selector(id, *spec.selector.pods);
    else if (selector_cgroup) control_.set_scope(id, {selector_cgroup});
    meta_[id % MCP_MAX_PROBES].store(std::move(m), std::memory_order_release);
    if (tuned) e.tuned.push_back(id);
  };
  if (spec.kind == config::ProbeKind::kSyscall) {
    add(session_.add_syscall(spec.target, base), meta, true);
    set_state(e, ProbeState::kAttached, "");
    return;
  }
  if (spec.container) {  // files come and go with containers (update_containers)
    add(session_.add_uprobe_without_file(spec.target, spec.symbol, spec.latency, base), meta, true);
    e.containers = std::make_unique<ContainerProbe>(session_, control_, e.handles.back().id(), e.name, spec);
    return;
  }
  const auto file = loader::find_binary(spec.target, 0);
  if (!file) {
    set_state(e, ProbeState::kWaiting,
              is_path(spec.target) ? "file not found: " + spec.target
                                   : "library " + spec.target + " not found in the linker cache");
    return;
  }
  e.watch_path = is_path(spec.target) ? spec.target : *file;
  e.failed_file = loader::file_id(e.watch_path);
  if (spec.kind == config::ProbeKind::kUprobe) {
    const auto target = loader::uprobe_target_in(*file, spec.symbol);
    add(session_.add_uprobe(target, spec.latency, -1, base), meta, true);
  } else {
    for (const auto& p : cuda::attach_cuda_file(session_, *file, -1, base, symbolizer_, spec.latency)) {
      auto m = std::make_shared<ProbeMeta>(*meta);
      m->cuda_api = p.api->display;
      add(p.id, std::move(m), !p.api->internal);
    }
  }
  e.file_id = e.failed_file.value_or(loader::FileId{});
  e.failed_file.reset();
  set_state(e, ProbeState::kAttached, "");
}

ProbeSet::Entry ProbeSet::make_entry(const config::ProbeSpec& spec) {
  Entry e;
  e.spec = spec;
  e.name = display_name(spec);
  e.cache_stamp = linker_cache_stamp();
  try_attach(e);
  return e;
}

void ProbeSet::tune(const Entry& e) {
  for (uint32_t id : e.tuned) {
    if (e.spec.sampling.target_qps) control_.set_target(id, *e.spec.sampling.target_qps);
    else control_.set_fixed_rate(id, e.spec.sampling.rate.value_or(1.0));
  }
}

void ProbeSet::apply(const reload::ConfigDiff& d) {
  std::lock_guard lock(mu_);
  // Stage: attach every new probe next to the running ones. A throw destroys `staged`,
  // whose handles detach what was attached here; entries_ is untouched.
  std::map<std::string, Entry> staged;
  for (const auto& spec : d.added) staged.insert_or_assign(spec.key(), make_entry(spec));
  // Commit: nothing below attaches, so nothing below can fail half-way.
  for (const auto& spec : d.removed)
    if (!staged.count(spec.key())) entries_.erase(spec.key());
  std::vector<Entry*> fresh;
  for (auto& [key, e] : staged) {
    tune(e);
    // A replaced entry detaches here.
    auto& placed = entries_.insert_or_assign(key, std::move(e)).first->second;
    if (placed.containers) fresh.push_back(&placed);
  }
  if (!fresh.empty() && follow_containers_) update_containers(fresh);
  for (const auto* updates : {&d.sampling_changed, &d.metadata_changed}) {
    for (const auto& u : *updates) {
      auto it = entries_.find(u.after.key());
      if (it == entries_.end()) continue;
      Entry& e = it->second;
      e.spec = u.after;
      for (const auto& h : e.handles) {
        auto old = meta(h.id());
        meta_[h.id() % MCP_MAX_PROBES].store(
            std::make_shared<ProbeMeta>(ProbeMeta{e.spec.service, e.spec.tags, old ? old->cuda_api : ""}),
            std::memory_order_release);
      }
      tune(e);
    }
  }
}

void ProbeSet::follow(Entry& e, const loader::FileId& now) {
  if (e.failed_file && *e.failed_file == now) return;
  const std::string file = is_path(e.spec.target) ? loader::find_binary(e.spec.target, 0).value_or("") : e.watch_path;
  try {
    if (file.empty()) return;  // gone again between the stat and now
    // Resolve every symbol first: the rebuilt file may have moved them, or lost one.
    std::vector<loader::UprobeTarget> targets;
    for (const auto& h : e.handles) targets.push_back(loader::uprobe_target_in(file, session_.probe(h.id())->symbol));
    for (size_t i = 0; i < targets.size(); i++) session_.follow_uprobe(e.handles[i].id(), targets[i]);
  } catch (const std::exception& ex) {
    e.failed_file = now;
    spdlog::error("probe {}: cannot follow the replaced file {}: {}; processes of the previous file stay traced",
                  e.name, e.watch_path, ex.what());
    return;
  }
  e.earlier.push_back(e.file_id);
  e.file_id = now;
  e.failed_file.reset();
  e.reattaches++;
  spdlog::info("probe {}: {} was replaced; attached to the new file too (the old one until no process maps it)",
               e.name, e.watch_path);
}

void ProbeSet::set_pod_names(const k8s::PodNames* pods) {
  std::lock_guard lock(mu_);
  pods_ = pods;
  follow_containers_ = true;
  update_containers();
}

void ProbeSet::update_containers(const std::vector<Entry*>& fresh) {
  std::vector<Entry*> todo = fresh;
  if (todo.empty())
    for (auto& [key, e] : entries_)
      if (e.containers) todo.push_back(&e);
  if (todo.empty()) return;
  const auto processes = k8s::container_processes();
  for (Entry* e : todo) {
    e->containers->update(processes, pods_);
    if (e->containers->files()) set_state(*e, ProbeState::kAttached, "");
    else if (!e->containers->failure().empty()) set_state(*e, ProbeState::kFailed, e->containers->failure());
    else set_state(*e, ProbeState::kWaiting, e->containers->waiting());
  }
}

void ProbeSet::refresh() {
  std::lock_guard lock(mu_);
  if (follow_containers_) update_containers();
  bool any_earlier = false;
  for (auto& [key, e] : entries_) {
    if (e.spec.kind == config::ProbeKind::kSyscall || e.containers) continue;
    if (e.state == ProbeState::kAttached) {
      if (auto now = loader::file_id(e.watch_path); now && !now->same_inode(e.file_id)) follow(e, *now);
      any_earlier = any_earlier || !e.earlier.empty();
      continue;
    }
    // Waiting or failed: try again when the file (or the linker cache) changed.
    if (is_path(e.spec.target)) {
      const auto now = loader::file_id(e.spec.target);
      if (!now || (e.failed_file && *e.failed_file == *now)) continue;
    } else {
      const uint64_t stamp = linker_cache_stamp();
      if (stamp == e.cache_stamp) continue;
      e.cache_stamp = stamp;
    }
    try {
      try_attach(e);
      if (e.state == ProbeState::kAttached) tune(e);
    } catch (const std::exception& ex) {
      e.handles.clear();
      e.tuned.clear();
      set_state(e, ProbeState::kFailed, ex.what());
    }
  }
  if (!any_earlier) return;
  const auto mapped = mapped_inodes();
  for (auto& [key, e] : entries_) {
    if (e.earlier.empty()) continue;
    bool live = false;
    for (const auto& f : e.earlier) live = live || mapped.count(f.ino);
    if (live) continue;
    for (const auto& h : e.handles) session_.drop_earlier_targets(h.id());
    e.earlier.clear();
    spdlog::info("probe {}: no process maps the replaced file any more; detached from it", e.name);
  }
}

std::vector<ProbeStatus> ProbeSet::status() const {
  std::lock_guard lock(mu_);
  std::vector<ProbeStatus> out;
  for (const auto& [key, e] : entries_) out.push_back({e.name, e.state, e.detail, e.reattaches});
  return out;
}

size_t ProbeSet::size() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [key, e] : entries_) n += e.state == ProbeState::kAttached;
  return n;
}

void ProbeSet::apply_services(const config::Config& cfg) {
  std::lock_guard lock(mu_);
  for (const auto& strategy : cfg.services) {
    // Probes of this service by version, then each version's target split evenly over them.
    std::map<std::string, std::vector<uint32_t>> by_version;
    for (const auto& spec : cfg.probes) {
      if (spec.service != strategy.service) continue;
      auto it = entries_.find(spec.key());
      if (it == entries_.end()) continue;
      const auto& ids = it->second.tuned;
      for (const auto& [k, v] : spec.tags)
        if (k == "version") by_version[v].insert(by_version[v].end(), ids.begin(), ids.end());
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

}  // namespace mcp::runtime
