// container_processes on a fake /proc and a directory tree standing for the cgroup2 mount:
// which processes are a container's (kubelet layouts only, pod-level cgroups left out), and
// each one's cgroup id (its directory's inode).
#include "k8s/container_processes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "../../support/files.h"

namespace {

namespace fs = std::filesystem;
using mcp::k8s::container_processes;

const std::string kUid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
const std::string kId(64, 'a');
const std::string kPod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2d8a4e_6c1b_4b0f_9a3e_1d2c3b4a5e6f.slice";
const std::string kContainer = kPod + "/cri-containerd-" + kId + ".scope";

class ContainerProcessesTest : public ::testing::Test {
 protected:
  void place(int pid, const std::string& cgroup_file) {
    fs::create_directories(dir_ / "proc" / std::to_string(pid));
    mcp::test::write_file(dir_ / "proc" / std::to_string(pid) / "cgroup", cgroup_file);
  }
  uint64_t id_of(const std::string& path) {
    fs::create_directories(dir_ / "cg" / path.substr(1));
    struct stat st {};
    EXPECT_EQ(stat((dir_ / "cg" / path.substr(1)).c_str(), &st), 0);
    return st.st_ino;
  }
  mcp::test::TempDir scratch_{"mcp-k8s-procs"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(ContainerProcessesTest, OnlyProcessesInAContainerCgroupWithTheirCgroupIds) {
  const uint64_t container = id_of(kContainer);
  const std::string cgroupfs = "/kubepods/besteffort/pod" + kUid + "/" + std::string(64, 'b');
  const uint64_t other = id_of(cgroupfs);
  place(300, "0::" + kContainer + "\n");
  place(12, "1:name=systemd:/x\n0::" + kContainer + "\n");  // v1 lines are skipped
  place(40, "0::" + cgroupfs + "\n");
  place(7, "0::/user.slice/user-0.slice/session-1.scope\n");                   // not a pod
  place(8, "0::" + kPod + "\n");                                               // the pod itself
  place(9, "0::" + kPod + "/crio-conmon-" + kId + ".scope\n");                 // crio's conmon
  place(10, "");                                                               // exited meanwhile
  place(11, "0::/../../.." + kContainer + "\n");  // seen from the agent's own cgroup namespace
  fs::create_directories(dir_ / "proc" / "self");
  mcp::test::write_file(dir_ / "proc" / "self" / "cgroup", "0::" + kContainer + "\n");  // not a pid
  const auto found = container_processes(dir_ / "proc", dir_ / "cg");
  ASSERT_EQ(found.size(), 4u);
  EXPECT_EQ(found[0].pid, 11);
  EXPECT_EQ(found[1].pid, 12);
  EXPECT_EQ(found[2].pid, 40);
  EXPECT_EQ(found[3].pid, 300);
  EXPECT_EQ(found[0].cgroup_id, container);
  EXPECT_EQ(found[1].cgroup_id, container);
  EXPECT_EQ(found[3].cgroup_id, container);
  EXPECT_EQ(found[2].cgroup_id, other);
  EXPECT_EQ(found[1].cgroup_path, kContainer);
  EXPECT_EQ(found[1].pod.pod_uid, kUid);
  EXPECT_EQ(found[1].pod.container_id, kId);
  EXPECT_EQ(found[2].pod.qos, "besteffort");
}

TEST_F(ContainerProcessesTest, ACgroupAlreadyGoneKeepsTheProcessWithIdZero) {
  place(5, "0::" + kContainer + "\n");
  fs::create_directories(dir_ / "cg");
  const auto found = container_processes(dir_ / "proc", dir_ / "cg");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].cgroup_id, 0u);
}

}  // namespace
