// Pod identity of events: fills Event::container_id and Event::pod_uid from the event's
// cgroup id, through the cgroup's path (k8s/cgroup_path.h), remembering the answer per
// cgroup id (ids are never reused while the machine runs, so an answer never goes stale).
//
// cgroup id -> path: open_by_handle_at on the cgroup2 mount (the id is the kernfs file
// handle; needs CAP_DAC_READ_SEARCH, which the agent keeps), which works after the process
// has exited; failing that, /proc/PID/cgroup of the event's process, used only when that
// path's directory still has the event's cgroup id (the process may have moved). A cgroup
// gone before its first event is looked up (a short-lived container) gets no identity.
// Not thread-safe: one per consumer thread.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/event.h"
#include "k8s/cgroup_path.h"

namespace mcp::k8s {

class PodIdentityCache {
 public:
  // `cgroup2_root`: the cgroup2 mount; empty: found in /proc/self/mountinfo on first use
  // (no mount: every event stays without identity). `proc`: the proc root, for tests.
  explicit PodIdentityCache(std::filesystem::path cgroup2_root = {}, std::filesystem::path proc = "/proc");
  ~PodIdentityCache();
  PodIdentityCache(const PodIdentityCache&) = delete;
  PodIdentityCache& operator=(const PodIdentityCache&) = delete;

  // Sets e.container_id and e.pod_uid (empty when the cgroup is not a pod's).
  void enrich(Event& e);

  // The cgroup path (relative to the mount, with a leading '/') of cgroup `id`, or nullopt.
  std::optional<std::string> cgroup_path(uint64_t id, uint32_t pid);

  size_t lookups() const { return lookups_; }  // cache misses that went to the kernel

 private:
  const PodCgroup& lookup(uint64_t id, uint32_t pid);

  std::filesystem::path root_;
  std::filesystem::path proc_;
  bool root_tried_ = false;
  std::unordered_map<uint64_t, PodCgroup> cache_;  // an empty PodCgroup: not a pod's
  uint64_t last_id_ = 0;
  const PodCgroup* last_ = nullptr;
  size_t lookups_ = 0;
};

}  // namespace mcp::k8s
