#include "k8s/pod_directory.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace mcp::k8s {
namespace {

using nlohmann::json;

std::string string_at(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string_view PodInfo::container_name(std::string_view id) const {
  for (const auto& [cid, name] : containers)
    if (cid == id) return name;
  return {};
}

std::optional<PodInfo> pod_info_from_json(const json& pod, const std::vector<std::string>& label_keys) {
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) return std::nullopt;
  const json& meta = pod["metadata"];
  PodInfo p;
  p.uid = string_at(meta, "uid");
  if (p.uid.empty()) return std::nullopt;
  p.name = string_at(meta, "name");
  p.ns = string_at(meta, "namespace");
  if (const auto l = meta.find("labels"); l != meta.end() && l->is_object())
    for (const auto& key : label_keys)
      if (const auto v = l->find(key); v != l->end() && v->is_string()) p.labels.emplace_back(key, v->get<std::string>());
  std::sort(p.labels.begin(), p.labels.end());
  if (const auto st = pod.find("status"); st != pod.end() && st->is_object()) {
    for (const char* list : {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"}) {
      const auto cs = st->find(list);
      if (cs == st->end() || !cs->is_array()) continue;
      for (const auto& c : *cs) {
        if (!c.is_object()) continue;
        const std::string id = string_at(c, "containerID"), name = string_at(c, "name");
        const size_t sep = id.find("://");
        if (sep == std::string::npos || name.empty()) continue;  // not started yet
        p.containers.emplace_back(id.substr(sep + 3), name);
      }
    }
  }
  return p;
}

void PodDirectory::replace(std::vector<PodInfo> pods) {
  std::unordered_map<std::string, std::shared_ptr<const PodInfo>> fresh;
  for (auto& p : pods) {
    auto uid = p.uid;
    fresh[uid] = std::make_shared<const PodInfo>(std::move(p));
  }
  std::lock_guard lk(mu_);
  pods_.swap(fresh);
  generation_.fetch_add(1, std::memory_order_release);
}

void PodDirectory::upsert(PodInfo pod) {
  auto uid = pod.uid;
  auto entry = std::make_shared<const PodInfo>(std::move(pod));
  std::lock_guard lk(mu_);
  pods_[uid] = std::move(entry);
  generation_.fetch_add(1, std::memory_order_release);
}

void PodDirectory::erase(const std::string& uid) {
  std::lock_guard lk(mu_);
  pods_.erase(uid);
  generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const PodInfo> PodDirectory::find(const std::string& uid) const {
  std::lock_guard lk(mu_);
  const auto it = pods_.find(uid);
  return it == pods_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const PodInfo>> PodDirectory::all() const {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<const PodInfo>> out;
  for (const auto& [uid, p] : pods_) out.push_back(p);
  return out;
}

size_t PodDirectory::size() const {
  std::lock_guard lk(mu_);
  return pods_.size();
}

}  // namespace mcp::k8s
