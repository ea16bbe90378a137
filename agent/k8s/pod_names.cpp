#include "k8s/pod_names.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kube/list_watch.h"

namespace mcp::k8s {

PodNames::PodNames(PodNamesSpec spec, std::function<void(const std::string&)> warn)
    : spec_(std::move(spec)), warn_(std::move(warn)), pods_(std::make_shared<PodDirectory>()) {
  if (!warn_) warn_ = [](const std::string& line) { spdlog::warn("{}", line); };
}

PodNames::~PodNames() {
  if (watch_) watch_->stop();
}

void PodNames::start() {
  std::string node = spec_.node_name;
  if (node.empty())
    if (const char* n = getenv("NODE_NAME")) node = n;
  const auto api = kube::resolve_api_config(spec_.api, why_);
  if (!api) return;
  if (node.empty()) {
    why_ = "no node name (set NODE_NAME from the downward API's spec.nodeName, or node_name)";
    return;
  }
  kube::ListWatchOptions o;
  o.path = "/api/v1/pods";
  o.field_selector = "spec.nodeName=" + node;
  o.what = "pod watch";
  kube::ListWatchHandlers h;
  // The handlers hold the directory, not `this`: the watch is stopped before either goes.
  h.on_list = [pods = pods_, keys = spec_.labels](const std::vector<nlohmann::json>& items) {
    std::vector<PodInfo> all;
    for (const auto& item : items)
      if (auto p = pod_info_from_json(item, keys)) all.push_back(std::move(*p));
    pods->replace(std::move(all));
  };
  h.on_event = [pods = pods_, keys = spec_.labels](std::string_view type, const nlohmann::json& object) {
    auto p = pod_info_from_json(object, keys);
    if (!p) return;
    if (type == "DELETED") pods->erase(p->uid);
    else pods->upsert(std::move(*p));
  };
  watch_ = std::make_unique<kube::ListWatch>(*api, std::move(o), std::move(h));
  watch_->start();
}

bool PodNames::wait_synced(std::chrono::milliseconds limit) const { return watch_ && watch_->wait_synced(limit); }

void PodNames::enrich(Event& e) {
  if (e.pod_uid.empty()) return;
  if (!watch_) {
    if (!warned_) {
      warned_ = true;
      warn_("pod names unavailable: " + why_ + "; events carry container_id and pod_uid only");
    }
    return;
  }
  if (const uint64_t g = pods_->generation(); g != cached_generation_) {
    cache_.clear();
    cached_generation_ = g;
  }
  auto it = cache_.find(e.cgroup_id);
  if (it == cache_.end()) {
    Answer a;
    a.pod = pods_->find(e.pod_uid);
    if (a.pod && !e.container_id.empty()) a.container = a.pod->container_name(e.container_id);
    it = cache_.emplace(e.cgroup_id, std::move(a)).first;
  }
  const Answer& a = it->second;
  if (!a.pod) return;
  e.pod = a.pod->name;
  e.pod_namespace = a.pod->ns;
  e.container = a.container;
  e.pod_labels = a.pod->labels;
}

}  // namespace mcp::k8s
