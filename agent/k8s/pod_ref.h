// PodRef: a set of pods named in agent.yaml or on the command line, as `pod: NAMESPACE/NAME`
// (one pod) or `namespace: NS` (every pod of the namespace). Header-only, so the quota table
// (control/) can carry it without linking the pod watch; k8s/pod_scope.h resolves it to cgroups.
// Names are checked as the API server checks them: a namespace is a DNS label (1-63 of
// [a-z0-9-], alphanumeric at both ends), a pod name a DNS subdomain (1-253 of [a-z0-9.-]).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mcp::k8s {

struct PodRef {
  std::string ns;
  std::string name;  // empty: every pod of `ns`
  // "pod:NS/NAME" or "namespace:NS": how tenants tables and logs name it
  std::string text() const { return name.empty() ? "namespace:" + ns : "pod:" + ns + "/" + name; }
  bool operator==(const PodRef&) const = default;
};

namespace detail {
inline bool dns_chars(std::string_view s, bool dots) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (dots && c == '.'))) return false;
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(s.front()) && alnum(s.back());
}
}  // namespace detail

// `kind` is "pod" or "namespace"; nullopt with *why set when `value` is not a valid name.
inline std::optional<PodRef> parse_pod_ref(std::string_view kind, std::string_view value, std::string* why) {
  const auto fail = [&](std::string msg) -> std::optional<PodRef> {
    if (why) *why = std::move(msg);
    return std::nullopt;
  };
  if (kind == "namespace") {
    if (value.size() > 63 || !detail::dns_chars(value, false))
      return fail("namespace '" + std::string(value) + "' is not a valid namespace name (lowercase letters, digits and '-')");
    return PodRef{std::string(value), {}};
  }
  if (kind != "pod") return fail("unknown pod reference '" + std::string(kind) + "' (pod or namespace)");
  const size_t slash = value.find('/');
  if (slash == std::string_view::npos)
    return fail("pod '" + std::string(value) + "' must be NAMESPACE/NAME");
  const std::string_view ns = value.substr(0, slash), name = value.substr(slash + 1);
  if (ns.size() > 63 || !detail::dns_chars(ns, false))
    return fail("pod '" + std::string(value) + "': '" + std::string(ns) + "' is not a valid namespace name");
  if (name.size() > 253 || !detail::dns_chars(name, true))
    return fail("pod '" + std::string(value) + "': '" + std::string(name) + "' is not a valid pod name");
  return PodRef{std::string(ns), std::string(name)};
}

}  // namespace mcp::k8s
