#include "k8s/container_processes.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "cgroup/cgroup2.h"

namespace mcp::k8s {
namespace {

// The cgroup v2 line ("0::/path") of a /proc/PID/cgroup file; empty when there is none.
std::string v2_path(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

// The path under the cgroup2 mount. In a cgroup namespace (the agent's own pod, with the host's
// /sys/fs/cgroup mounted) a process outside it shows "/../../kubepods...": the climb ends at the
// host's root for every other pod, so what follows it is the path under the host's mount.
std::string under_mount(std::string_view path) {
  while (path.starts_with("/../") || path == "/..") path.remove_prefix(3);
  return std::string(path.empty() ? "/" : path);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<ContainerProcess> container_processes(const std::filesystem::path& proc,
                                                  std::filesystem::path cgroup2_root) {
  if (cgroup2_root.empty()) {
    try {
      cgroup2_root = cgroup::find_cgroup2_mount(proc / "self/mountinfo");
    } catch (const std::exception&) {
      // No cgroup2 mount: processes are still found, without cgroup ids.
    }
  }
  std::vector<ContainerProcess> out;
  std::map<std::string, uint64_t> ids;  // a container's processes share one cgroup
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc, ec)) {
    const std::string name = entry.path().filename().string();
    if (!all_digits(name)) continue;
    std::string path = v2_path(entry.path() / "cgroup");  // empty: exited meanwhile, or no v2
    if (path.empty()) continue;
    auto pod = parse_pod_cgroup(path);
    if (!pod || pod->container_id.empty()) continue;
    auto [it, fresh] = ids.emplace(path, 0);
    if (fresh && !cgroup2_root.empty()) {
      struct stat st;
      if (stat((cgroup2_root / under_mount(path).substr(1)).c_str(), &st) == 0) it->second = st.st_ino;
    }
    out.push_back({static_cast<pid_t>(std::stol(name)), std::move(path), it->second, std::move(*pod)});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace mcp::k8s
