// PodCgroups: `pod:` / `namespace:` references (k8s/pod_ref.h) resolved to the pod-level
// cgroups of this node: the API server's pods (a PodDirectory, from the pod watch) give the
// uids a reference names, a walk of the cgroup2 mount (kubelet layouts, k8s/cgroup_path.h)
// gives each uid's pod cgroup, which holds every container of the pod.
// The walk is repeated only when it is needed: when the directory changed since the last
// walk, or when a named pod has no cgroup yet (the kubelet creates it after the API lists
// the pod), then at most once per `rescan_every`. A deleted pod leaves the directory and
// stops matching at the next resolve(). Not thread-safe: one owner (the control loop) calls
// resolve(); the directory itself may be updated from the watch thread meanwhile.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "k8s/pod_directory.h"
#include "k8s/pod_ref.h"

namespace mcp::k8s {

bool pod_matches(const PodInfo& pod, const PodRef& ref);

// Pod-level cgroups below `cgroup2_root`, by pod uid, with their v2 ids (the directory's
// inode). A pod's containers are not descended into; at most 10 levels are walked.
std::unordered_map<std::string, uint64_t> scan_pod_cgroups(const std::filesystem::path& cgroup2_root);

class PodCgroups {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  PodCgroups(std::shared_ptr<const PodDirectory> pods, std::filesystem::path cgroup2_root,
             std::chrono::milliseconds rescan_every = std::chrono::seconds(1), Clock clock = {});

  // The cgroup ids of the pods `ref` names that have a cgroup on this node, sorted.
  std::vector<uint64_t> resolve(const PodRef& ref);
  // Starts a round of resolve() calls (one per reference): walks the cgroup tree at most
  // once for the round. Returns true when anything resolve() can answer may have changed
  // since the last round (directory generation, cgroups walked), false when every answer
  // would be the same as last round's.
  bool begin_round();
  size_t scans() const { return scans_; }

 private:
  std::shared_ptr<const PodDirectory> pods_;
  std::filesystem::path root_;
  std::chrono::milliseconds rescan_every_;
  Clock clock_;
  std::unordered_map<std::string, uint64_t> by_uid_;
  uint64_t scanned_generation_ = UINT64_MAX;
  uint64_t round_generation_ = UINT64_MAX;
  std::chrono::steady_clock::time_point last_scan_{};
  bool missing_ = false;       // a named pod had no cgroup at the last resolve()
  bool scanned_in_round_ = false;
  size_t scans_ = 0;
  void scan();
};

}  // namespace mcp::k8s
