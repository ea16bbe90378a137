// PodIdentityCache on a directory tree standing for the cgroup2 mount and a fake /proc:
// the /proc/PID/cgroup path is used only while it still names the event's cgroup (the
// handle lookup needs a real cgroup2 mount: tests/integration/k8s covers it).
#include "k8s/pod_identity.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

namespace {

namespace fs = std::filesystem;
using mcp::Event;
using mcp::k8s::PodIdentityCache;

const std::string kId = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
const std::string kPod = "/kubepods/burstable/pod5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";

class PodIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mcp-k8s-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "cg" / (kPod.substr(1) + "/" + kId));
    fs::create_directories(dir_ / "cg/user.slice");
  }
  void TearDown() override { fs::remove_all(dir_); }

  uint64_t id_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat((dir_ / "cg" / path.substr(1)).c_str(), &st), 0) << path;
    return st.st_ino;
  }
  void place(uint32_t pid, const std::string& path) {
    fs::create_directories(dir_ / "proc" / std::to_string(pid));
    std::ofstream(dir_ / "proc" / std::to_string(pid) / "cgroup") << "1:name=systemd:/elsewhere\n0::" << path << "\n";
  }
  Event event(uint32_t pid, uint64_t cgroup_id) {
    Event e;
    e.pid = pid;
    e.cgroup_id = cgroup_id;
    return e;
  }

  fs::path dir_;
};

TEST_F(PodIdentityTest, ContainerProcessGetsItsPodAndContainer) {
  PodIdentityCache cache(dir_ / "cg", dir_ / "proc");
  place(100, kPod + "/" + kId);
  Event e = event(100, id_of(kPod + "/" + kId));
  cache.enrich(e);
  EXPECT_EQ(e.container_id, kId);
  EXPECT_EQ(e.pod_uid, "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");
}

TEST_F(PodIdentityTest, AnswerIsCachedPerCgroupAfterTheProcessIsGone) {
  PodIdentityCache cache(dir_ / "cg", dir_ / "proc");
  place(100, kPod + "/" + kId);
  const uint64_t id = id_of(kPod + "/" + kId);
  Event a = event(100, id);
  cache.enrich(a);
  fs::remove_all(dir_ / "proc" / "100");
  Event other = event(7, id_of("/user.slice"));  // not a pod's, nor resolvable
  cache.enrich(other);
  Event b = event(101, id);  // another process of the same container, no /proc entry
  cache.enrich(b);
  EXPECT_EQ(b.container_id, kId);
  EXPECT_TRUE(other.container_id.empty());
  EXPECT_TRUE(other.pod_uid.empty());
  EXPECT_EQ(cache.lookups(), 2u);
}

TEST_F(PodIdentityTest, ProcessThatMovedIsNotGivenItsNewCgroupsIdentity) {
  // The event was taken in /user.slice; by the time it is read the process sits in a pod.
  PodIdentityCache cache(dir_ / "cg", dir_ / "proc");
  place(100, kPod + "/" + kId);
  Event e = event(100, id_of("/user.slice"));
  cache.enrich(e);
  EXPECT_TRUE(e.container_id.empty());
  EXPECT_TRUE(e.pod_uid.empty());
}

TEST_F(PodIdentityTest, EnrichOverwritesWhatAReusedEventCarried) {
  PodIdentityCache cache(dir_ / "cg", dir_ / "proc");
  place(100, "/user.slice");
  Event e = event(100, id_of("/user.slice"));
  e.container_id = "stale";
  e.pod_uid = "stale";
  cache.enrich(e);
  EXPECT_TRUE(e.container_id.empty());
  EXPECT_TRUE(e.pod_uid.empty());
}

TEST_F(PodIdentityTest, NoCgroup2MountMeansNoIdentityAndNoError) {
  fs::create_directories(dir_ / "proc/self");
  std::ofstream(dir_ / "proc/self/mountinfo") << "22 1 0:21 / /proc rw - proc proc rw\n";
  PodIdentityCache cache({}, dir_ / "proc");
  Event e = event(1, 12345);
  cache.enrich(e);
  EXPECT_TRUE(e.container_id.empty());
  EXPECT_EQ(cache.lookups(), 0u);
}

}  // namespace
