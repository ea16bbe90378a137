#include "k8s/pod_scope.h"

#include <sys/stat.h>

#include <algorithm>

#include "k8s/cgroup_path.h"

namespace mcp::k8s {
namespace fs = std::filesystem;

bool pod_matches(const PodInfo& pod, const PodRef& ref) {
  return pod.ns == ref.ns && (ref.name.empty() || pod.name == ref.name);
}

std::unordered_map<std::string, uint64_t> scan_pod_cgroups(const fs::path& cgroup2_root) {
  std::unordered_map<std::string, uint64_t> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(cgroup2_root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const auto pod = parse_pod_cgroup("/" + it->path().lexically_relative(cgroup2_root).string());
    if (pod && pod->container_id.empty()) {
      // The pod's own cgroup: its containers (and crio's conmon scope) lie below it.
      struct stat st;
      if (::stat(it->path().c_str(), &st) == 0) out.emplace(pod->pod_uid, st.st_ino);
      it.disable_recursion_pending();
    } else if (pod || it.depth() >= 9) {
      it.disable_recursion_pending();  // a container's own sub-cgroups name nothing
    }
  }
  return out;
}

PodCgroups::PodCgroups(std::shared_ptr<const PodDirectory> pods, fs::path cgroup2_root,
                       std::chrono::milliseconds rescan_every, Clock clock)
    : pods_(std::move(pods)), root_(std::move(cgroup2_root)), rescan_every_(rescan_every), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::steady_clock::now(); };
}

void PodCgroups::scan() {
  by_uid_ = scan_pod_cgroups(root_);
  last_scan_ = clock_();
  scans_++;
}

bool PodCgroups::begin_round() {
  const uint64_t gen = pods_->generation();
  const bool changed = gen != scanned_generation_;
  if (changed || (missing_ && clock_() - last_scan_ >= rescan_every_)) {
    // Read the generation before walking: a pod added during the walk moves it again.
    scanned_generation_ = gen;
    missing_ = false;
    scan();
    return true;
  }
  return false;
}

std::vector<uint64_t> PodCgroups::resolve(const PodRef& ref) {
  std::vector<uint64_t> out;
  for (const auto& pod : pods_->all()) {
    if (!pod_matches(*pod, ref)) continue;
    const auto it = by_uid_.find(pod->uid);
    if (it == by_uid_.end()) missing_ = true;
    else out.push_back(it->second);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace mcp::k8s
