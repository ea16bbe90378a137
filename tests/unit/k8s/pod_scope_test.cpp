// `pod:` / `namespace:` references: their parsing, and their resolution to pod cgroups
// through a PodDirectory and a walk of a directory tree laid out as the kubelet does
// (plain directories: the walk reads names and inodes only).
#include "k8s/pod_scope.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <algorithm>

#include "../../support/files.h"

namespace {

namespace fs = std::filesystem;
using mcp::k8s::PodCgroups;
using mcp::k8s::PodDirectory;
using mcp::k8s::PodInfo;
using mcp::k8s::PodRef;
using mcp::k8s::parse_pod_ref;

const std::string kUidA = "1b4e28ba-2fa1-11d2-883f-0016d3cca427", kUidB = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538",
                  kUidC = "3d6a4adc-4ac3-33f4-a55f-2238f5eec649";

std::string systemd_pod(const std::string& uid) {
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  return "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice";
}

uint64_t inode(const fs::path& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(PodRef, ParsesPodsAndNamespacesAndRejectsWhatTheApiServerWould) {
  std::string why;
  EXPECT_EQ(parse_pod_ref("pod", "team-a/web-1.x", &why), (PodRef{"team-a", "web-1.x"}));
  EXPECT_EQ(parse_pod_ref("namespace", "team-a", &why), (PodRef{"team-a", ""}));
  EXPECT_EQ(parse_pod_ref("pod", "team-a/web-1", &why)->text(), "pod:team-a/web-1");
  EXPECT_EQ(parse_pod_ref("namespace", "team-a", &why)->text(), "namespace:team-a");
  for (const auto& [kind, value] : std::vector<std::pair<std::string, std::string>>{
           {"pod", "web-1"}, {"pod", "/web-1"}, {"pod", "team-a/"}, {"pod", "Team/web"}, {"pod", "a/b/c"},
           {"namespace", ""}, {"namespace", "Team"}, {"namespace", "a.b"}, {"namespace", "-a"},
           {"namespace", std::string(64, 'a')}, {"service", "x"}}) {
    why.clear();
    EXPECT_FALSE(parse_pod_ref(kind, value, &why)) << kind << " " << value;
    EXPECT_FALSE(why.empty()) << kind << " " << value;
  }
  EXPECT_NE(why.find("pod or namespace"), std::string::npos) << why;
}

TEST(PodCgroups, WalkFindsPodCgroupsOfEveryLayoutAndNotTheirContainers) {
  mcp::test::TempDir root("mcp-podscope");
  const fs::path r = root.path();
  const fs::path a = r / systemd_pod(kUidA);
  fs::create_directories(a / ("cri-containerd-" + std::string(64, 'a') + ".scope"));
  fs::create_directories(a / ("crio-conmon-" + std::string(64, 'b') + ".scope"));
  const fs::path b = r / "kubepods" / "besteffort" / ("pod" + kUidB);
  fs::create_directories(b / std::string(64, 'c'));
  fs::create_directories(r / "system.slice" / "containerd.service");
  const auto found = mcp::k8s::scan_pod_cgroups(r);
  EXPECT_EQ(found.size(), 2u);
  EXPECT_EQ(found.at(kUidA), inode(a));
  EXPECT_EQ(found.at(kUidB), inode(b));
}

PodInfo pod(const std::string& ns, const std::string& name, const std::string& uid) { return PodInfo{uid, name, ns, {}, {}}; }

// One namespace, several pods: each of its pods' cgroups; a pod listed before the kubelet made
// its cgroup is found on a later walk; a deleted pod stops matching.
TEST(PodCgroups, NamespaceCoversItsPodsAndFollowsPodsComingAndGoing) {
  mcp::test::TempDir root("mcp-podscope");
  const fs::path r = root.path();
  auto dir = std::make_shared<PodDirectory>();
  auto now = std::chrono::steady_clock::time_point{};
  PodCgroups cgroups(dir, r, std::chrono::seconds(1), [&] { return now; });
  fs::create_directories(r / systemd_pod(kUidA));
  fs::create_directories(r / systemd_pod(kUidB));
  fs::create_directories(r / systemd_pod(kUidC));
  dir->replace({pod("team-a", "p1", kUidA), pod("team-a", "p2", kUidB), pod("team-b", "q1", kUidC)});

  ASSERT_TRUE(cgroups.begin_round());
  std::vector<uint64_t> ab{inode(r / systemd_pod(kUidA)), inode(r / systemd_pod(kUidB))};
  std::sort(ab.begin(), ab.end());
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", ""}), ab);
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", "p1"}), std::vector<uint64_t>{inode(r / systemd_pod(kUidA))});
  EXPECT_EQ(cgroups.resolve(PodRef{"team-c", ""}), std::vector<uint64_t>{});
  EXPECT_FALSE(cgroups.begin_round()) << "nothing changed: no walk";
  EXPECT_EQ(cgroups.scans(), 1u);

  // Listed before its cgroup exists: not found, walked again only after the interval.
  const std::string uid_d = "4e7b5bed-5bd4-44a5-b66a-3349a6ffd75a";
  dir->upsert(pod("team-a", "p3", uid_d));
  ASSERT_TRUE(cgroups.begin_round());
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", ""}), ab);
  fs::create_directories(r / systemd_pod(uid_d));
  EXPECT_FALSE(cgroups.begin_round());
  now += std::chrono::seconds(1);
  ASSERT_TRUE(cgroups.begin_round());
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", ""}).size(), 3u);
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", "p3"}), std::vector<uint64_t>{inode(r / systemd_pod(uid_d))});

  dir->erase(kUidA);
  ASSERT_TRUE(cgroups.begin_round());
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", "p1"}), std::vector<uint64_t>{});
  EXPECT_EQ(cgroups.resolve(PodRef{"team-a", ""}).size(), 2u);
}

}  // namespace
