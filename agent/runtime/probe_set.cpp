#include "runtime/probe_set.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <dirent.h>

#include <filesystem>
#include <set>

#include "clock/clock_source.h"
#include "common/error.h"
#include "cgroup/cgroup2.h"
#include "control/tenant_quota.h"
#include "cuda/cuda_attach.h"
#include "loader/proc_maps.h"
#include "loader/target_resolver.h"

namespace mcp::runtime {
namespace fs = std::filesystem;

uint64_t selector_cgroup_id(const config::Selector& selector) {
  if (selector.empty() || selector.pods) return 0;  // pods: the control loop follows their cgroups
  const fs::path root = cgroup::find_cgroup2_mount();
  if (!selector.cgroup_path.empty()) return cgroup::resolve_cgroup_id(selector.cgroup_path, root);
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
    case config::ProbeKind::kUsdt: {
      const std::string name = loader::file_probe_name(spec.target, spec.symbol, spec.kind == config::ProbeKind::kUsdt);
      if (spec.container)
        return name + " in " + (spec.container->any() ? "containers" : spec.container->describe());
      return name;
    }
    case config::ProbeKind::kSyscall: return "syscall:" + spec.target;
    case config::ProbeKind::kCuda: return "cuda:" + spec.target;
  }
  return spec.target;
}

bool is_path(const std::string& target) { return target.find('/') != std::string::npos; }

// A uprobe on `file`, named as the process sees it: /proc/PID/root/usr/bin/x (a process in
// another mount namespace, `trace --pid`) is shown as /usr/bin/x.
loader::UprobeTarget uprobe_target_shown(const std::string& file, const config::ProbeSpec& spec,
                                         const std::string& symbol) {
  auto t = loader::probe_target_in(file, symbol, spec.kind == config::ProbeKind::kUsdt);
  t.shown = loader::path_under_proc_root(t.binary);
  return t;
}

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
  c.string_args = spec.string_args;
  c.stack = spec.stack;
  c.args = spec.args ? static_cast<int8_t>(*spec.args) : -1;
  // A low fixed rate is sampled in time windows, unless every call is needed (a trace-id
  // decision, the rate controller's target; CUDA: timed launches, cuda_attach.h).
  c.windowed = spec.kind != config::ProbeKind::kSyscall && !spec.sampling.target_qps &&
               !(spec.trace_id && spec.sampling.consistent);
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

void ProbeSet::add_handle(Entry& e, uint32_t id, std::shared_ptr<const ProbeMeta> meta, bool tuned) {
  const config::ProbeSpec& spec = e.spec;
  e.handles.emplace_back(*this, id);
  // A scoped probe sees nothing until the control loop writes its cgroups (a container
  // probe's: ContainerProbe, as its containers come).
  if (spec.selector.pods) control_.set_selector(id, *spec.selector.pods);
  else if (e.selector_cgroup) control_.set_scope(id, {e.selector_cgroup});
  meta_[id % MCP_MAX_PROBES].store(std::move(meta), std::memory_order_release);
  if (tuned) e.tuned.push_back(id);
}

bool ProbeSet::cuda_file_attached(const mcp_file_key& key) const { return claimed_.count({key.dev, key.ino}) > 0; }

std::optional<size_t> ProbeSet::attach_cuda(Entry& e, const std::string& file, const mcp_file_key& key) {
  if (cuda_file_attached(key)) return std::nullopt;
  auto attached = cuda::attach_cuda_file(session_, file, -1, base_config(e.spec), symbolizer_, e.spec.latency, key);
  for (const auto& p : attached.probes) {
    add_handle(e, p.id, std::make_shared<ProbeMeta>(ProbeMeta{e.spec.service, e.spec.tags, p.api->display}),
               !p.api->internal);
    // A file found after apply() tuned the entry (discovery) is tuned here.
    if (e.state == ProbeState::kAttached && !p.api->internal) tune_id(e, p.id);
  }
  e.runtime_marks.push_back(std::move(attached.runtime));
  e.cuda_files.emplace_back(*this, key);  // looked at: not again, CUDA or not
  return attached.probes.size();
}

void ProbeSet::attach_groups(const std::vector<config::ProbeSpec>& added) {
  std::map<std::pair<std::string, bool>, std::vector<const config::ProbeSpec*>> by_file;  // (file, latency)
  std::set<std::string> keys;
  for (const auto& spec : added)
    if (spec.kind == config::ProbeKind::kUprobe && !spec.container && session_.can_group(base_config(spec), spec.latency) &&
        keys.insert(spec.key()).second)
      if (const auto file = loader::find_binary(spec.target, 0)) by_file[{*file, spec.latency}].push_back(&spec);
  for (const auto& [file_latency, specs] : by_file) {
    if (specs.size() < 2) continue;
    const auto& [file, latency] = file_latency;
    std::vector<std::string> symbols;
    for (const auto* spec : specs) symbols.push_back(spec->symbol);
    std::vector<std::optional<loader::UprobeTarget>> found;
    try {
      found = loader::uprobe_targets_in(file, symbols);
    } catch (const std::exception&) {
      continue;  // not ELF: try_attach says so for each probe
    }
    std::vector<loader::UprobeTarget> targets;
    std::vector<loader::ProbeConfig> configs;
    std::vector<std::string> group_keys;
    for (size_t i = 0; i < specs.size(); i++) {
      if (!found[i]) continue;
      found[i]->shown = loader::path_under_proc_root(file);
      targets.push_back(std::move(*found[i]));
      configs.push_back(base_config(*specs[i]));
      group_keys.push_back(specs[i]->key());
    }
    if (targets.size() < 2) continue;
    try {
      const auto ids = session_.add_uprobe_group(targets, latency, uprobe_pid_, configs);
      for (size_t i = 0; i < ids.size(); i++) grouped_ids_[group_keys[i]] = ids[i];
      if (on_file_) on_file_(file);
    } catch (const std::exception& ex) {
      spdlog::debug("{} uprobes of {} attach one by one: {}", targets.size(), file, ex.what());
    }
  }
}

void ProbeSet::try_attach(Entry& e) {
  const config::ProbeSpec& spec = e.spec;
  const loader::ProbeConfig base = base_config(spec);
  e.selector_cgroup = selector_cgroup_id(spec.selector);  // throws for a missing one
  auto meta = std::make_shared<ProbeMeta>(ProbeMeta{spec.service, spec.tags, {}});
  if (spec.kind == config::ProbeKind::kSyscall) {
    add_handle(e, session_.add_syscall(spec.target, base, spec.latency), meta, true);
    set_state(e, ProbeState::kAttached, "");
    return;
  }
  if (spec.container) {  // files come and go with containers (update_containers)
    add_handle(e,
               session_.add_uprobe_without_file(spec.target, spec.symbol, spec.latency, base,
                                                spec.kind == config::ProbeKind::kUsdt),
               meta, true);
    e.containers = std::make_unique<ContainerProbe>(session_, control_, e.handles.back().id(), e.name, spec);
    return;
  }
  if (spec.kind == config::ProbeKind::kCuda && spec.target == config::kCudaDiscover) {
    // Watch first: a library mapped while the rest is found is still reported.
    e.library_watch = std::make_unique<Entry::LibraryWatch>(session_);
    // The system's own (linker cache): in place before any process maps them, so no gap.
    for (const char* name : {"libcudart", "libcuda"})
      if (const auto file = loader::find_binary(name, 0))
        if (const auto key = cuda::kernel_file_key(*file)) attach_cuda(e, *file, *key);
    // Those the traced processes map now; again on the first poll, for a tree the front end
    // seeds after the probes are in place.
    scan_cuda_libraries(e);
    e.scan_pending = true;
    set_state(e, ProbeState::kAttached, "");
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
  if (spec.kind == config::ProbeKind::kUprobe || spec.kind == config::ProbeKind::kUsdt) {
    if (auto g = grouped_ids_.find(spec.key()); g != grouped_ids_.end()) {
      add_handle(e, g->second, meta, true);
      grouped_ids_.erase(g);
      e.grouped = true;
    } else {
      add_handle(e,
                 session_.add_uprobe(uprobe_target_shown(*file, spec, spec.symbol), spec.latency, uprobe_pid_, base),
                 meta, true);
    }
    if (on_file_) on_file_(*file);
  } else {
    const auto key = cuda::kernel_file_key(*file);
    if (!key) throw runtime_error("cannot stat " + *file);
    if (!attach_cuda(e, *file, *key)) {
      e.file_id = e.failed_file.value_or(loader::FileId{});
      e.failed_file.reset();
      set_state(e, ProbeState::kAttached, "traced through another CUDA probe");
      return;
    }
  }
  e.file_id = e.failed_file.value_or(loader::FileId{});
  e.failed_file.reset();
  set_state(e, ProbeState::kAttached, "");
}

namespace {

mcp_file_key kernel_key_of(const loader::Mapping& m) { return {cuda::kernel_dev(m.dev), m.inode}; }

}  // namespace

void ProbeSet::scan_cuda_libraries(Entry& e) {
  DIR* d = opendir("/proc");
  if (!d) return;
  while (dirent* ent = readdir(d)) {
    if (ent->d_name[0] < '0' || ent->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atol(ent->d_name));
    if (!session_.traces(pid)) continue;
    scan_process(e, pid, 0);  // ktime 0: mapped before the agent watched
  }
  closedir(d);
}

void ProbeSet::scan_process(Entry& e, pid_t pid, uint64_t ktime_ns) {
  const auto maps = loader::read_proc_maps(pid);
  for (const auto& m : maps) {
    if (!m.executable || !cuda::is_cuda_library(m.path)) continue;
    mcp_lib_mapped rec{};
    rec.ktime_ns = ktime_ns;
    rec.dev = kernel_key_of(m).dev;
    rec.ino = m.inode;
    rec.start = m.start;
    rec.pid = static_cast<uint32_t>(pid);
    attach_discovered(e, rec, maps);
  }
}

void ProbeSet::attach_discovered(Entry& e, const mcp_lib_mapped& rec, const std::vector<loader::Mapping>& maps) {
  const mcp_file_key key{rec.dev, rec.ino};
  const pid_t pid = static_cast<pid_t>(rec.pid);
  // Its code files, while it lives: a short-lived process's kernels are still named from
  // the host functions' files after it exited.
  for (const auto& m : maps)
    if (m.executable && !m.path.empty() && m.path.front() == '/')
      if (auto f = loader::path_in_root_of(pid, m.path); !f.empty()) symbolizer_.add_file(f);
  if (cuda_file_attached(key)) return;
  for (const auto& f : e.failed_files)
    if (f.dev == key.dev && f.ino == key.ino) return;
  // The file as the process names it, opened through its root (another mount namespace).
  std::string path, file;
  for (const auto& m : maps)
    if (m.start == rec.start || (m.inode == rec.ino && kernel_key_of(m).dev == rec.dev && m.executable)) {
      path = m.path;
      break;
    }
  if (!path.empty()) file = loader::path_in_root_of(pid, path);
  // On overlayfs (a container's root) the kernel reports the layer's file and stat() the
  // overlay's: the same library may already be traced under its path's key (two probes on
  // one file count every call twice).
  if (const auto by_path = file.empty() ? std::nullopt : cuda::kernel_file_key(file);
      by_path && cuda_file_attached(*by_path))
    return;
  try {
    if (file.empty())
      throw runtime_error(path.empty() ? "process " + std::to_string(pid) + " exited before its mapping was read"
                                       : path + " is not reachable in the root of process " + std::to_string(pid));
    if (attach_cuda(e, file, key) == size_t{0}) {
      // Named like a CUDA library (a stub, a shim), without one API function: nothing traced.
      std::string line = path + " (pid " + std::to_string(pid) + "): not traced: no CUDA API function in it";
      spdlog::warn("probe {}: CUDA library {}", e.name, line);
      e.discovered.push_back(std::move(line));
      return;
    }
  } catch (const std::exception& ex) {
    e.failed_files.push_back(key);
    const std::string what = path.empty() ? std::string(rec.name) : path;
    spdlog::error("probe {}: CUDA library {} (mapped by pid {}) not traced: {}", e.name, what, pid, ex.what());
    e.discovered.push_back(what + " (pid " + std::to_string(pid) + "): not traced: " + ex.what());
    return;
  }
  std::string line = path + " (pid " + std::to_string(pid) + ")";
  if (rec.ktime_ns) {
    const int64_t gap = clock::SystemClockSource().monotonic_ns() - static_cast<int64_t>(rec.ktime_ns);
    line += fmt::format(": traced {:.1f} ms after it was mapped", static_cast<double>(std::max<int64_t>(gap, 0)) / 1e6);
  } else {
    line += ": already mapped when the agent looked";
  }
  spdlog::info("probe {}: attached to {}", e.name, line);
  e.discovered.push_back(std::move(line));
}

void ProbeSet::poll_libraries() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock) return;
  Entry* d = nullptr;
  for (auto& [key, e] : entries_)
    if (e.library_watch) d = &e;
  if (!d) return;
  // A kernel without bpf_find_vma reports no mappings: the processes are scanned each second.
  if (const auto now = std::chrono::steady_clock::now();
      !session_.watches_mappings() && now - d->scanned_at >= std::chrono::seconds(1)) {
    d->scanned_at = now;
    d->scan_pending = true;
  }
  // The watch's reports first: they know when each library was mapped.
  const auto mapped = session_.take_mapped_libraries();
  if (mapped.empty() && !d->scan_pending) return;  // the usual poll: nothing to publish either
  const StatusPublisher publish(*this);
  for (const auto& rec : mapped) {
    if (rec.ino == 0) {
      // The kernel could not look at this mapping (mmap lock busy): look at all of them.
      scan_process(*d, static_cast<pid_t>(rec.pid), rec.ktime_ns);
      continue;
    }
    attach_discovered(*d, rec, loader::read_proc_maps(static_cast<pid_t>(rec.pid)));
  }
  if (d->scan_pending) {
    d->scan_pending = false;
    scan_cuda_libraries(*d);
  }
}

std::vector<std::string> ProbeSet::discovered_libraries() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, e] : entries_) {
    out.insert(out.end(), e.discovered.begin(), e.discovered.end());
    if (e.library_watch && e.cuda_files.empty())
      out.push_back("none: no traced process mapped a CUDA runtime or driver library");
  }
  return out;
}

ProbeSet::Entry ProbeSet::make_entry(const config::ProbeSpec& spec) {
  Entry e;
  e.spec = spec;
  e.name = display_name(spec);
  e.cache_stamp = linker_cache_stamp();
  if (!spec.from_pattern) {
    try_attach(e);
    return e;
  }
  try {
    try_attach(e);
  } catch (const std::exception& ex) {
    fail(e, ex.what());
  }
  return e;
}

void ProbeSet::fail(Entry& e, const std::string& why) {
  e.handles.clear();
  e.tuned.clear();
  e.runtime_marks.clear();
  e.cuda_files.clear();
  set_state(e, ProbeState::kFailed, why);
}

void ProbeSet::tune_id(const Entry& e, uint32_t id) {
  if (e.spec.sampling.target_qps) control_.set_target(id, *e.spec.sampling.target_qps);
  else control_.set_fixed_rate(id, e.spec.sampling.rate.value_or(1.0));
}

void ProbeSet::tune(const Entry& e) {
  for (uint32_t id : e.tuned) tune_id(e, id);
}

void ProbeSet::apply(const reload::ConfigDiff& d) {
  std::lock_guard lock(mu_);
  const StatusPublisher publish(*this);
  // Every probe this reload removes (or a failed one stages) is closed at once at the end.
  const loader::BpfSession::DetachBatch detach(session_);
  // Stage: attach every new probe next to the running ones. A throw destroys `staged`,
  // whose handles detach what was attached here; entries_ is untouched.
  std::map<std::string, Entry> staged;
  // A grouped probe has no sampling windows of its own: one whose rate falls to where windows
  // apply is attached again, alone (BpfSession::can_group).
  std::vector<config::ProbeSpec> added = d.added;
  std::set<std::string> alone;
  for (const auto& u : d.sampling_changed)
    if (auto it = entries_.find(u.after.key());
        it != entries_.end() && it->second.grouped && !session_.can_group(base_config(u.after), u.after.latency)) {
      added.push_back(u.after);
      alone.insert(u.after.key());
    }
  {
    // Group ids no entry took (a staging failure) are detached here.
    struct Leftovers {
      ProbeSet& set;
      ~Leftovers() {
        for (const auto& [key, id] : set.grouped_ids_) set.session_.remove_probe(id);
        set.grouped_ids_.clear();
      }
    } leftovers{*this};
    attach_groups(added);
    for (const auto& spec : added) staged.insert_or_assign(spec.key(), make_entry(spec));
  }
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
      if (it == entries_.end() || alone.count(u.after.key())) continue;
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
    for (const auto& h : e.handles) targets.push_back(uprobe_target_shown(file, e.spec, session_.probe(h.id())->symbol));
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
  const StatusPublisher publish(*this);
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
  const StatusPublisher publish(*this);
  if (follow_containers_) update_containers();
  bool any_earlier = false;
  for (auto& [key, e] : entries_) {
    if (e.spec.kind == config::ProbeKind::kSyscall || e.containers || e.library_watch) continue;
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
      fail(e, ex.what());
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

ProbeSet::StatusPublisher::~StatusPublisher() {
  std::vector<ProbeStatus> out;
  for (const auto& [key, e] : set_.entries_) out.push_back({e.name, e.state, e.detail, e.reattaches});
  std::lock_guard lock(set_.status_mu_);
  set_.status_ = std::move(out);
}

std::vector<ProbeStatus> ProbeSet::status() const {
  std::lock_guard lock(status_mu_);
  return status_;
}

size_t ProbeSet::size() const {
  std::lock_guard lock(status_mu_);
  size_t n = 0;
  for (const auto& s : status_) n += s.state == ProbeState::kAttached;
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
