// Pod identity from a cgroup v2 path, as the kubelet lays pods out:
//   systemd driver  .../kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/<ctr>
//                   .../kubepods.slice/kubepods-pod<uid>.slice/<ctr>            (guaranteed QoS)
//                   (a kubelet --cgroup-root such as /kubelet gives kubelet-kubepods.slice, ...)
//     <ctr> = cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
//     the uid's dashes are written as underscores (systemd escaping) and are turned back
//   cgroupfs driver .../kubepods/<qos>/pod<uid>/<ctr> and .../kubepods/pod<uid>/<ctr>
//     <ctr> = <id> (or the runtime-prefixed forms above, without ".scope")
// <qos> is burstable or besteffort; <uid> a UUID (8-4-4-4-12 hex) or a static pod's 32-hex
// hash; <id> 64 lowercase hex. Paths are untrusted (a container may name its own sub-cgroups):
// the first kubepods component decides, what lies below the container is ignored, and any
// component that does not fit the layout yields nothing rather than a guess. A pod-level
// cgroup (or crio's conmon scope) yields the pod uid with an empty container id.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mcp::k8s {

struct PodCgroup {
  std::string pod_uid;       // with dashes, as the API server spells metadata.uid
  std::string container_id;  // the runtime's id (no "containerd://" prefix); may be empty
  std::string qos;           // "guaranteed", "burstable" or "besteffort"
  bool operator==(const PodCgroup&) const = default;
};

// The pod (and container) a cgroup path belongs to; nullopt when it is not a pod's.
// `path` is as /proc/PID/cgroup writes it, or with any prefix (the cgroup2 mount, a
// node's own nesting such as kind's /system.slice/docker-<node>.scope).
std::optional<PodCgroup> parse_pod_cgroup(std::string_view path);

}  // namespace mcp::k8s
