#include "runtime/scope_table.h"

#include <exception>

namespace mcp::runtime {

void ScopeTable::forget(uint32_t probe_id) {
  probes_.erase(probe_id);
  replace(probe_id, {});
}

bool ScopeTable::names_pods() const {
  for (const auto& t : tenants_)
    if (t.pods) return true;
  for (const auto& [id, source] : probes_)
    if (std::holds_alternative<k8s::PodRef>(source)) return true;
  return false;
}

std::map<uint64_t, uint64_t> ScopeTable::wanted(uint32_t probe_id, const Resolve& resolve) const {
  std::map<uint64_t, uint64_t> out;
  if (probe_id == 0) {
    // Where two tenants claim a cgroup the more specific wins: written last.
    for (int pass = 0; pass < 3; pass++)
      for (const auto& t : tenants_) {
        const int rank = !t.pods ? 1 : t.pods->name.empty() ? 0 : 2;
        if (rank != pass) continue;
        if (!t.pods) out[t.cgroup_id] = t.tenant_id;
        else
          for (uint64_t cg : resolve(*t.pods, "tenant " + t.pods->text())) out[cg] = t.tenant_id;
      }
    return out;
  }
  const auto it = probes_.find(probe_id);
  if (it == probes_.end()) return out;
  if (const auto* cgroups = std::get_if<std::set<uint64_t>>(&it->second)) {
    for (uint64_t cg : *cgroups) out[cg] = 1;
  } else {
    const auto& pods = std::get<k8s::PodRef>(it->second);
    for (uint64_t cg : resolve(pods, "selector " + pods.text())) out[cg] = 1;
  }
  return out;
}

void ScopeTable::write(const Resolve& resolve) {
  std::exception_ptr first;
  std::set<uint32_t> ids{0};
  for (const auto& [id, source] : probes_) ids.insert(id);
  for (const auto& [id, entries] : written_) ids.insert(id);  // a stale id is emptied
  for (uint32_t id : ids) {
    try {
      write(id, resolve);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void ScopeTable::write(uint32_t probe_id, const Resolve& resolve) { replace(probe_id, wanted(probe_id, resolve)); }

std::map<uint64_t, uint64_t> ScopeTable::written(uint32_t probe_id) const {
  const auto it = written_.find(probe_id);
  return it == written_.end() ? std::map<uint64_t, uint64_t>{} : it->second;
}

void ScopeTable::replace(uint32_t probe_id, const std::map<uint64_t, uint64_t>& entries) {
  auto& now = written_[probe_id];
  std::exception_ptr full;
  std::vector<std::pair<uint64_t, uint64_t>> refused;
  for (const auto& [cgroup, value] : entries) {
    const auto it = now.find(cgroup);
    if (it != now.end() && it->second == value) continue;
    try {
      maps_.put_scope(probe_id, cgroup, value);
      now[cgroup] = value;
    } catch (...) {
      if (!full) full = std::current_exception();
      refused.emplace_back(cgroup, value);
    }
  }
  for (auto it = now.begin(); it != now.end();) {
    if (entries.count(it->first)) {
      ++it;
      continue;
    }
    maps_.erase_scope(probe_id, it->first);
    it = now.erase(it);
  }
  if (full) {
    // The removals may have made room.
    full = nullptr;
    for (const auto& [cgroup, value] : refused) {
      try {
        maps_.put_scope(probe_id, cgroup, value);
        now[cgroup] = value;
      } catch (...) {
        if (!full) full = std::current_exception();
      }
    }
  }
  if (now.empty()) written_.erase(probe_id);
  if (full) std::rethrow_exception(full);
}

}  // namespace mcp::runtime
