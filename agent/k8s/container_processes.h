// Container processes: the processes on this node whose cgroup is a container's in the
// kubelet layouts (k8s/cgroup_path.h), read from each /proc/PID/cgroup's cgroup v2 line.
// A process in a pod-level cgroup (crio's conmon, a pod's own scope) is not in a container
// and is left out. One call reads every process's cgroup file once; callers decide how often.
// Seen from a cgroup namespace (paths starting "/.."), the path after the climb is taken as
// the one under the (host's) cgroup2 mount: right for every process outside the agent's pod.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "k8s/cgroup_path.h"

namespace mcp::k8s {

struct ContainerProcess {
  pid_t pid = 0;
  std::string cgroup_path;  // as /proc/PID/cgroup writes it (relative to the cgroup2 mount)
  uint64_t cgroup_id = 0;   // the cgroup v2 id (its directory's inode); 0 when already gone
  PodCgroup pod;            // pod uid and container id (never empty)
};

// Every container process, by ascending pid. `proc`: the proc root; `cgroup2_root`: the
// cgroup2 mount (empty: found in <proc>/self/mountinfo; none: cgroup ids stay 0).
std::vector<ContainerProcess> container_processes(const std::filesystem::path& proc = "/proc",
                                                  std::filesystem::path cgroup2_root = {});

}  // namespace mcp::k8s
