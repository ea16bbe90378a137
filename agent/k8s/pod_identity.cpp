#include "k8s/pod_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "cgroup/cgroup2.h"

namespace mcp::k8s {
namespace {

std::optional<std::string> readlink_fd(int fd) {
  char link[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  std::string buf(4096, '\0');
  const ssize_t n = readlink(link, buf.data(), buf.size());
  if (n <= 0 || static_cast<size_t>(n) >= buf.size()) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// `full` without the mount prefix, keeping the leading '/'; nullopt when not under it.
std::optional<std::string> below(const std::string& full, const std::string& root) {
  if (full == root) return std::string("/");
  if (full.size() <= root.size() || full.compare(0, root.size(), root) != 0 || full[root.size()] != '/')
    return std::nullopt;
  return full.substr(root.size());
}

}  // namespace

PodIdentityCache::PodIdentityCache(std::filesystem::path cgroup2_root, std::filesystem::path proc)
    : root_(std::move(cgroup2_root)), proc_(std::move(proc)) {}

PodIdentityCache::~PodIdentityCache() = default;

std::optional<std::string> PodIdentityCache::cgroup_path(uint64_t id, uint32_t pid) {
  if (!root_tried_) {
    root_tried_ = true;
    if (root_.empty()) {
      try {
        root_ = cgroup::find_cgroup2_mount(proc_ / "self/mountinfo");
      } catch (const std::exception&) {
        return std::nullopt;  // no cgroup2: nothing to resolve, ever
      }
    }
  }
  if (root_.empty() || id == 0) return std::nullopt;
  lookups_++;
  try {
    const int fd = cgroup::open_cgroup_by_id(id, root_);
    auto full = readlink_fd(fd);
    close(fd);
    if (full) return below(*full, root_.string());
    return std::nullopt;
  } catch (const std::exception&) {
    // A cgroup already gone, no handle support or no privilege: try the process's own view.
  }
  // The process's own view, used only if it still is in that cgroup.
  std::ifstream in(proc_ / std::to_string(pid) / "cgroup");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("0::/")) continue;
    std::string path = line.substr(3);
    struct stat st {};
    if (stat((root_ / path.substr(1)).c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == id) return path;
  }
  return std::nullopt;
}

const PodCgroup& PodIdentityCache::lookup(uint64_t id, uint32_t pid) {
  if (auto it = cache_.find(id); it != cache_.end()) return it->second;
  PodCgroup found;
  if (auto path = cgroup_path(id, pid))
    if (auto pod = parse_pod_cgroup(*path)) found = std::move(*pod);
  return cache_.emplace(id, std::move(found)).first->second;
}

void PodIdentityCache::enrich(Event& e) {
  // Events come in runs from one cgroup; unordered_map references stay valid across inserts.
  if (!last_ || last_id_ != e.cgroup_id) {
    last_ = &lookup(e.cgroup_id, e.pid);
    last_id_ = e.cgroup_id;
  }
  e.container_id = last_->container_id;
  e.pod_uid = last_->pod_uid;
}

}  // namespace mcp::k8s
