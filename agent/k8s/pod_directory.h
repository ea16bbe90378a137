// PodDirectory: what the API server says about this node's pods, by uid: name, namespace,
// the configured labels, and each container's name by its runtime id. Written from the pod
// watch's thread, read from the consumer thread: a lookup takes a short lock and shares the
// entry (never copied); generation() changes with every update, so a reader can cache
// answers per cgroup and drop them when it moves.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mcp::k8s {

struct PodInfo {
  std::string uid, name, ns;
  std::vector<std::pair<std::string, std::string>> labels;      // the configured keys present, by key
  std::vector<std::pair<std::string, std::string>> containers;  // runtime id -> container name
  // The name of the container with runtime id `id`; empty when the pod does not list it (yet).
  std::string_view container_name(std::string_view id) const;
};

// A Pod object's identity; nullopt without metadata.uid. Containers come from status
// containerStatuses, initContainerStatuses and ephemeralContainerStatuses, whose containerID
// is "<runtime>://<id>" (containerd, cri-o, docker); `label_keys` selects the labels kept.
std::optional<PodInfo> pod_info_from_json(const nlohmann::json& pod, const std::vector<std::string>& label_keys);

class PodDirectory {
 public:
  void replace(std::vector<PodInfo> pods);  // a fresh list: everything else is gone
  void upsert(PodInfo pod);
  void erase(const std::string& uid);
  std::shared_ptr<const PodInfo> find(const std::string& uid) const;
  std::vector<std::shared_ptr<const PodInfo>> all() const;
  size_t size() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const PodInfo>> pods_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace mcp::k8s
