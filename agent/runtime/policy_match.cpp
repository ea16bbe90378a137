#include "runtime/policy_match.h"

#include <algorithm>

namespace mcp::runtime {

bool policy_applies(const PolicyUpdate& policy, const loader::ProbeInfo& probe, const ProbeMeta* meta,
                    const std::optional<std::string>& run_service) {
  if (!policy.probe.empty() && policy.probe != probe.name && policy.probe != probe.symbol) return false;
  const std::optional<std::string> service = meta ? std::optional<std::string>(meta->service) : run_service;
  if (!policy.service.empty() && service && *service != policy.service) return false;
  for (const auto& [key, value] : policy.service_labels) {
    if (!meta) return false;
    const bool has = std::any_of(meta->tags.begin(), meta->tags.end(),
                                 [&](const auto& tag) { return tag.first == key && tag.second == value; });
    if (!has) return false;
  }
  return true;
}

}  // namespace mcp::runtime
