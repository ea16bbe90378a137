// The kubelet's cgroup layouts, as real nodes write them in /proc/PID/cgroup, and paths
// that only look like them (cgroup names are chosen by whoever creates the cgroup).
#include "k8s/cgroup_path.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using mcp::k8s::parse_pod_cgroup;
using mcp::k8s::PodCgroup;

const std::string kId = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
const std::string kUid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
const std::string kUidSystemd = "5f2d8a4e_6c1b_4b0f_9a3e_1d2c3b4a5e6f";

TEST(PodCgroupPath, SystemdContainerdBurstable) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd +
                             ".slice/cri-containerd-" + kId + ".scope"),
            (PodCgroup{kUid, kId, "burstable"}));
}

TEST(PodCgroupPath, SystemdCrioBestEffort) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSystemd +
                             ".slice/crio-" + kId + ".scope"),
            (PodCgroup{kUid, kId, "besteffort"}));
}

TEST(PodCgroupPath, SystemdDockerGuaranteedHasNoQosLevel) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice/docker-" + kId + ".scope"),
            (PodCgroup{kUid, kId, "guaranteed"}));
}

TEST(PodCgroupPath, CgroupfsDriverWithAndWithoutQos) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods/burstable/pod" + kUid + "/" + kId), (PodCgroup{kUid, kId, "burstable"}));
  EXPECT_EQ(parse_pod_cgroup("/kubepods/besteffort/pod" + kUid + "/" + kId), (PodCgroup{kUid, kId, "besteffort"}));
  EXPECT_EQ(parse_pod_cgroup("/kubepods/pod" + kUid + "/" + kId), (PodCgroup{kUid, kId, "guaranteed"}));
  EXPECT_EQ(parse_pod_cgroup("/kubepods/pod" + kUid + "/crio-" + kId), (PodCgroup{kUid, kId, "guaranteed"}));
}

TEST(PodCgroupPath, StaticPodUidIsAHashWithoutDashes) {
  const std::string hash = "4f9c1a2b3c4d5e6f708192a3b4c5d6e7";
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + hash +
                             ".slice/cri-containerd-" + kId + ".scope"),
            (PodCgroup{hash, kId, "burstable"}));
}

TEST(PodCgroupPath, PodLevelCgroupAndConmonGiveThePodOnly) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice"),
            (PodCgroup{kUid, "", "burstable"}));
  EXPECT_EQ(parse_pod_cgroup("/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice/crio-conmon-" + kId + ".scope"),
            (PodCgroup{kUid, "", "guaranteed"}));
}

TEST(PodCgroupPath, PrefixesAboveKubepodsAreAllowed) {
  // kind: the node is a docker container; the mount point in front; kubelet --cgroup-root=/kubelet.
  EXPECT_EQ(parse_pod_cgroup("/system.slice/docker-abc.scope/kubepods/pod" + kUid + "/" + kId),
            (PodCgroup{kUid, kId, "guaranteed"}));
  EXPECT_EQ(parse_pod_cgroup("/sys/fs/cgroup/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope"),
            (PodCgroup{kUid, kId, "guaranteed"}));
  EXPECT_EQ(parse_pod_cgroup("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                             "kubelet-kubepods-besteffort-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope"),
            (PodCgroup{kUid, kId, "besteffort"}));
}

TEST(PodCgroupPath, SubCgroupsAContainerMadeStillBelongToIt) {
  EXPECT_EQ(parse_pod_cgroup("/kubepods/burstable/pod" + kUid + "/" + kId + "/init.scope"),
            (PodCgroup{kUid, kId, "burstable"}));
}

TEST(PodCgroupPath, AContainerCannotClaimAnotherPodBelowItself) {
  // The first kubepods component decides: a fake layout nested inside a container is ignored.
  const std::string other = "11111111-2222-3333-4444-555555555555";
  const std::string other_id(64, 'e');
  EXPECT_EQ(parse_pod_cgroup("/kubepods/pod" + kUid + "/" + kId + "/kubepods/pod" + other + "/" + other_id),
            (PodCgroup{kUid, kId, "guaranteed"}));
}

TEST(PodCgroupPath, NotAPodsCgroup) {
  for (const std::string& p : std::vector<std::string>{"/", "", "/user.slice/user-0.slice/session-1.scope", "/system.slice/containerd.service",
                        "/kubepods.slice", "/kubepods", "/kubepods/burstable", "/kubepods.slice/kubepods-burstable.slice",
                        "/notkubepods/pod" + kUid + "/" + kId, "/kubepods.slices/kubepods-pod" + kUidSystemd + ".slice"})
    EXPECT_EQ(parse_pod_cgroup(p), std::nullopt) << p;
}

TEST(PodCgroupPath, MalformedComponentsYieldNothing) {
  const std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice/";
  for (const std::string& p : std::vector<std::string>{
           // container ids: wrong length, upper case, not hex, no runtime prefix, no .scope, unknown runtime
           pod + "cri-containerd-" + kId.substr(1) + ".scope", pod + "cri-containerd-" + kId + "0.scope",
           pod + "cri-containerd-" + std::string(64, 'A') + ".scope", pod + "cri-containerd-" + std::string(64, 'g') + ".scope",
           pod + kId + ".scope", pod + "cri-containerd-" + kId, pod + "podman-" + kId + ".scope",
           pod + "cri-containerd-.scope", pod + ".scope", pod + "crio-conmon-xyz.scope",
           // pod uids: dashes in the systemd spelling, underscores in cgroupfs, wrong length, misplaced separators
           "/kubepods.slice/kubepods-pod" + kUid + ".slice/docker-" + kId + ".scope",
           "/kubepods/pod" + kUidSystemd + "/" + kId, "/kubepods/pod" + kUid.substr(1) + "/" + kId,
           "/kubepods/pod5f2d8a4e6-c1b-4b0f-9a3e-1d2c3b4a5e6f/" + kId, "/kubepods/pod/" + kId,
           "/kubepods/pod../" + kId, "/kubepods/pod" + kUid + "\n/" + kId,
           // the QoS level must match its parent, and be one of the two
           "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod" + kUidSystemd + ".slice/docker-" + kId + ".scope",
           "/kubepods.slice/kubepods-gold.slice/kubepods-gold-pod" + kUidSystemd + ".slice/docker-" + kId + ".scope",
           "/kubepods/gold/pod" + kUid + "/" + kId,
           "/kubepods.slice/other-pod" + kUidSystemd + ".slice/docker-" + kId + ".scope",
       })
    EXPECT_EQ(parse_pod_cgroup(p), std::nullopt) << p;
}

TEST(PodCgroupPath, HostileBytesAndSizesDoNotCrash) {
  std::string huge = "/kubepods";
  for (int i = 0; i < 10000; ++i) huge += "/pod" + kUid;
  EXPECT_EQ(parse_pod_cgroup(huge), std::nullopt);
  EXPECT_EQ(parse_pod_cgroup(std::string(100000, '/')), std::nullopt);
  std::string bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(static_cast<char>(c));
  EXPECT_EQ(parse_pod_cgroup("/kubepods/pod" + bytes + "/" + kId), std::nullopt);
  EXPECT_EQ(parse_pod_cgroup(std::string("/kubepods/pod\0", 14) + kUid), std::nullopt);
}

}  // namespace
