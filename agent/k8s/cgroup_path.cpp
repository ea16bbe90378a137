#include "k8s/cgroup_path.h"

#include <array>
#include <vector>

namespace mcp::k8s {
namespace {

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool all_hex(std::string_view s) {
  for (char c : s)
    if (!is_lower_hex(c)) return false;
  return true;
}

// A pod uid as the API server writes it, from its cgroup spelling (`sep` stands for '-').
std::optional<std::string> pod_uid(std::string_view s, char sep) {
  if (s.size() == 32 && all_hex(s)) return std::string(s);  // static pod: a hash, no dashes
  if (s.size() != 36) return std::nullopt;
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here) {
      if (out[i] != sep) return std::nullopt;
      out[i] = '-';
    } else if (!is_lower_hex(out[i])) {
      return std::nullopt;
    }
  }
  return out;
}

std::optional<std::string> container_id(std::string_view s) {
  if (s.size() != 64 || !all_hex(s)) return std::nullopt;
  return std::string(s);
}

bool consume_prefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

bool consume_suffix(std::string_view& s, std::string_view suffix) {
  if (!s.ends_with(suffix)) return false;
  s.remove_suffix(suffix.size());
  return true;
}

// A container component: "<runtime>-<id><suffix>", or the bare id when `bare_ok`.
// nullopt: not a container at all; an empty string: a pod's non-container scope (crio-conmon).
std::optional<std::string> container_component(std::string_view s, std::string_view suffix, bool bare_ok) {
  if (!suffix.empty() && !consume_suffix(s, suffix)) return std::nullopt;
  if (s.starts_with("crio-conmon-")) return container_id(s.substr(12)) ? std::optional<std::string>("") : std::nullopt;
  for (std::string_view runtime : {"cri-containerd-", "crio-", "docker-"})
    if (consume_prefix(s, runtime)) return container_id(s);
  if (bare_ok) return container_id(s);
  return std::nullopt;
}

std::vector<std::string_view> split(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    if (!part.empty()) parts.push_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

bool is_qos(std::string_view s) { return s == "burstable" || s == "besteffort"; }

// The components after the pod's: nothing (the pod cgroup itself), or a container and
// whatever that container made below it.
std::optional<PodCgroup> finish(std::string uid, std::string qos, const std::vector<std::string_view>& parts,
                                size_t next, std::string_view suffix, bool bare_ok) {
  PodCgroup out{std::move(uid), "", std::move(qos)};
  if (next < parts.size()) {
    auto id = container_component(parts[next], suffix, bare_ok);
    if (!id) return std::nullopt;
    out.container_id = std::move(*id);
  }
  return out;
}

std::optional<PodCgroup> parse_systemd(const std::vector<std::string_view>& parts, size_t i, std::string_view base) {
  // parts[i] == base + ".slice"; children repeat the parent's name: base-<qos>.slice, base-<qos>-pod<uid>.slice
  if (++i >= parts.size()) return std::nullopt;
  std::string_view c = parts[i];
  std::string qos = "guaranteed";
  const std::string stem = std::string(base) + "-";
  if (!consume_prefix(c, stem) || !consume_suffix(c, ".slice")) return std::nullopt;
  if (!c.starts_with("pod")) {
    if (!is_qos(c)) return std::nullopt;
    qos = std::string(c);
    if (++i >= parts.size()) return std::nullopt;
    c = parts[i];
    if (!consume_prefix(c, stem + qos + "-") || !consume_suffix(c, ".slice")) return std::nullopt;
  }
  if (!consume_prefix(c, "pod")) return std::nullopt;
  auto uid = pod_uid(c, '_');
  if (!uid) return std::nullopt;
  return finish(std::move(*uid), std::move(qos), parts, i + 1, ".scope", false);
}

std::optional<PodCgroup> parse_cgroupfs(const std::vector<std::string_view>& parts, size_t i) {
  if (++i >= parts.size()) return std::nullopt;
  std::string qos = "guaranteed";
  if (is_qos(parts[i])) {
    qos = std::string(parts[i]);
    if (++i >= parts.size()) return std::nullopt;
  }
  std::string_view c = parts[i];
  if (!consume_prefix(c, "pod")) return std::nullopt;
  auto uid = pod_uid(c, '-');
  if (!uid) return std::nullopt;
  return finish(std::move(*uid), std::move(qos), parts, i + 1, "", true);
}

}  // namespace

std::optional<PodCgroup> parse_pod_cgroup(std::string_view path) {
  const auto parts = split(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view c = parts[i];
    if (c == "kubepods") return parse_cgroupfs(parts, i);
    if (consume_suffix(c, ".slice") && (c == "kubepods" || c.ends_with("-kubepods"))) return parse_systemd(parts, i, c);
  }
  return std::nullopt;
}

}  // namespace mcp::k8s
