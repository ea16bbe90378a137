#include "runtime/container_probe.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <tuple>

#include "k8s/pod_names.h"
#include "loader/proc_maps.h"
#include "loader/target_resolver.h"

namespace mcp::runtime {
namespace {

std::string file_text(const std::pair<uint64_t, uint64_t>& f) {
  return "device " + std::to_string(major(f.first)) + ":" + std::to_string(minor(f.first)) + ", inode " +
         std::to_string(f.second);
}

}  // namespace

std::vector<const k8s::ContainerProcess*> ContainerProbe::matching(
    const std::vector<k8s::ContainerProcess>& processes, const k8s::PodNames* pods,
    std::map<std::string, std::string>& pod_names) {
  const config::ContainerScope& scope = *spec_.container;
  std::vector<const k8s::ContainerProcess*> out;
  for (const auto& p : processes) {
    auto named = pod_names.find(p.pod.pod_uid);
    if (named == pod_names.end()) {
      const auto info = pods ? pods->directory().find(p.pod.pod_uid) : nullptr;
      named = pod_names.emplace(p.pod.pod_uid, info ? info->ns + "/" + info->name : "").first;
    }
    const std::string& ns_name = named->second;
    const bool match = scope.any() || (!ns_name.empty() && ns_name.starts_with(scope.ns + "/") &&
                                       (scope.pod.empty() || ns_name == scope.ns + "/" + scope.pod));
    if (match) out.push_back(&p);
  }
  return out;
}

void ContainerProbe::set_scope(const std::set<uint64_t>& cgroups) {
  try {
    control_.set_scope(id_, cgroups);
    scope_error_.clear();
  } catch (const std::exception& e) {
    if (scope_error_ != e.what()) spdlog::error("probe {}: {}", name_, e.what());
    scope_error_ = e.what();
  }
}

void ContainerProbe::update(const std::vector<k8s::ContainerProcess>& processes, const k8s::PodNames* pods) {
  const std::string& name = name_;
  const config::ContainerScope& scope = *spec_.container;
  if (!scope.any() && (!pods || !pods->unavailable().empty())) {
    set_scope({});
    files_.clear();
    failed_.clear();
    failure_.clear();
    waiting_ = "pod names unavailable (" + (pods ? pods->unavailable() : std::string("kubernetes.pod_names is false")) +
               "): container: {pod|namespace} needs the pod watch; only container: {} works without it";
    return;
  }
  std::map<std::string, std::string> pod_names;  // uid -> "NS/NAME" ("" unknown), for this scan
  const auto procs = matching(processes, pods, pod_names);

  // Scope before files: a file attached below already sees only the matching containers.
  std::set<uint64_t> cgroups;
  for (const auto* p : procs)
    if (p->cgroup_id) cgroups.insert(p->cgroup_id);
  set_scope(cgroups);

  // The file at PATH for each distinct view of the file system (mount namespace and root).
  std::map<FileKey, Found> found;
  std::set<std::tuple<uint64_t, uint64_t, uint64_t>> views;
  for (const auto* p : procs) {
    const std::string proc = "/proc/" + std::to_string(p->pid);
    struct stat ns, root;
    if (stat((proc + "/ns/mnt").c_str(), &ns) == 0 && stat((proc + "/root").c_str(), &root) == 0 &&
        !views.emplace(ns.st_ino, root.st_dev, root.st_ino).second)
      continue;
    const std::string path = loader::path_in_root_of(p->pid, spec_.target);
    const auto id = path.empty() ? std::nullopt : loader::file_id(path);
    if (!id) continue;
    const std::string& pod = pod_names[p->pod.pod_uid];
    found.emplace(FileKey{id->dev, id->ino},
                  Found{path, "container " + p->pod.container_id.substr(0, 12) + " of pod " +
                                  (pod.empty() ? p->pod.pod_uid : pod)});
  }

  for (const auto& [key, f] : found) {
    if (files_.count(key) || failed_.count(key)) continue;
    try {
      loader::UprobeTarget target = loader::probe_target_in(f.path, spec_.symbol, spec_.kind == config::ProbeKind::kUsdt);
      target.shown = spec_.target;
      files_.emplace(key, File{f.where, loader::FileAttachment(session_, id_, target)});
      spdlog::info("probe {}: attached to {} in {} ({})", name, spec_.target, f.where, file_text(key));
    } catch (const std::exception& e) {
      failed_.emplace(key, e.what());
      failure_ = e.what();
      spdlog::error("probe {}: cannot attach to {} in {} ({}): {}", name, spec_.target, f.where, file_text(key),
                    e.what());
    }
  }

  // Gone from every matching container's PATH: detached unless one of them still runs it.
  std::optional<std::set<uint64_t>> mapped;
  for (auto it = files_.begin(); it != files_.end();) {
    if (found.count(it->first)) {
      ++it;
      continue;
    }
    if (!mapped) {
      mapped.emplace();
      for (const auto* p : procs)
        for (const auto& m : loader::read_proc_maps(p->pid)) mapped->insert(m.inode);
    }
    if (mapped->count(it->first.second)) {  // inode only: maps' device differs on overlayfs
      ++it;
      continue;
    }
    spdlog::info("probe {}: detached from {} of {} ({}): no matching container has it or runs it any more", name,
                 spec_.target, it->second.shown, file_text(it->first));
    it = files_.erase(it);
  }
  std::erase_if(failed_, [&](const auto& f) { return !found.count(f.first); });
  if (failed_.empty()) failure_.clear();
  waiting_ = !files_.empty() ? ""
             : scope.any()  ? "no container has " + spec_.target + " (yet)"
                            : "no container in " + scope.describe() + " has " + spec_.target + " (yet)";
}

}  // namespace mcp::runtime
