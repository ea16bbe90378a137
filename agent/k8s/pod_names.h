// PodNames: pod name, namespace, container name and the configured pod labels on every event
// that carries a pod uid (k8s/pod_identity.h), from a watch on this node's pods
// (GET /api/v1/pods?fieldSelector=spec.nodeName=NODE, kube/list_watch.h) into a PodDirectory.
// Without API access (outside a cluster, no service account, no node name) events keep
// their cgroup-derived container_id and pod_uid, and the first event of a pod says once on
// stderr why names are unavailable. A container that starts after the last update of its
// pod has no name until the kubelet reports its id (the next MODIFIED event).
// enrich() runs on the consumer thread and caches its answer per cgroup id until the
// directory changes; the watch runs on its own thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/event.h"
#include "k8s/pod_directory.h"
#include "kube/api_config.h"

namespace mcp::kube {
class ListWatch;
}

namespace mcp::k8s {

struct PodNamesSpec {
  kube::ApiConfig api;              // empty fields: in-cluster defaults (kube/api_config.h)
  std::string node_name;            // empty: $NODE_NAME
  std::vector<std::string> labels;  // pod label keys copied onto events (pod_labels)
  bool operator==(const PodNamesSpec&) const = default;
};

class PodNames {
 public:
  // `warn`: where the one "names unavailable" line goes (default: spdlog).
  explicit PodNames(PodNamesSpec spec, std::function<void(const std::string&)> warn = {});
  ~PodNames();
  PodNames(const PodNames&) = delete;
  PodNames& operator=(const PodNames&) = delete;

  // Resolves the API configuration and starts the watch; without API access only remembers why.
  void start();
  // True once the first list has arrived (false at once without API access).
  bool wait_synced(std::chrono::milliseconds limit) const;
  void enrich(Event& e);
  const std::string& unavailable() const { return why_; }  // empty while watching
  const PodDirectory& directory() const { return *pods_; }
  std::shared_ptr<const PodDirectory> shared_directory() const { return pods_; }

 private:
  struct Answer {
    std::shared_ptr<const PodInfo> pod;  // null: the API does not know the pod (yet)
    std::string_view container;          // into *pod
  };

  PodNamesSpec spec_;
  std::function<void(const std::string&)> warn_;
  std::shared_ptr<PodDirectory> pods_;
  std::unique_ptr<kube::ListWatch> watch_;
  std::string why_;
  bool warned_ = false;
  uint64_t cached_generation_ = UINT64_MAX;
  std::unordered_map<uint64_t, Answer> cache_;  // by cgroup id
};

}  // namespace mcp::k8s
