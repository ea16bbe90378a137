#include "cgroup/cgroup2.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "../../support/fake_cgroup.h"

namespace mcp::cgroup {
namespace {

namespace fs = std::filesystem;
using test::FakeCgroupTree;
using test::inode_of;

TEST(Cgroup2Mount, FoundInMountinfoAmongV1Mounts) {
  FakeCgroupTree dir;
  const fs::path mountinfo = dir.root() / "mountinfo";
  std::ofstream(mountinfo)
      << "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
         "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
         "41 31 0:38 / /sys/fs/cgroup/my\\040unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(find_cgroup2_mount(mountinfo), "/sys/fs/cgroup/my unified");
}

TEST(Cgroup2Mount, MissingIsARuntimeError) {
  FakeCgroupTree dir;
  const fs::path mountinfo = dir.root() / "mountinfo";
  std::ofstream(mountinfo) << "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
  try {
    find_cgroup2_mount(mountinfo);
    ADD_FAILURE();
  } catch (const mcp::Error& e) {
    EXPECT_EQ(e.code(), mcp::ExitCode::kRuntime);
  }
}

TEST(CgroupId, IsTheDirectoryInodeForRelativeMountRelativeAndFullPaths) {
  FakeCgroupTree tree;
  const fs::path dir = tree.add("tenants/a");
  EXPECT_EQ(resolve_cgroup_id("tenants/a", tree.root()), inode_of(dir));
  EXPECT_EQ(resolve_cgroup_id("/tenants/a", tree.root()), inode_of(dir));  // as /proc/PID/cgroup writes it
  EXPECT_EQ(resolve_cgroup_id(dir.string(), tree.root()), inode_of(dir));  // already under the mount
}

TEST(CgroupId, MissingOrNonCgroupDirectoryIsAUsageError) {
  FakeCgroupTree tree;
  fs::create_directories(tree.root() / "plain");  // no cgroup.procs
  EXPECT_THROW(resolve_cgroup_id("nope", tree.root()), mcp::Error);
  EXPECT_THROW(resolve_cgroup_id("plain", tree.root()), mcp::Error);
  EXPECT_THROW(resolve_cgroup_id("", tree.root()), mcp::Error);
}

// On the real cgroup2 mount the root cgroup has id 1, and a child's inode is the id the kernel
// reports through a file handle (what bpf_get_current_cgroup_id returns).
TEST(CgroupId, MatchesKernelCgroupIdOnRealCgroup2) {
  fs::path mount;
  try {
    mount = find_cgroup2_mount();
  } catch (const mcp::Error& e) {
    GTEST_SKIP() << "no cgroup2 mount: " << e.what();
  }
  EXPECT_EQ(resolve_cgroup_id(mount.string(), "/"), 1u);
  if (::geteuid() != 0) GTEST_SKIP() << "creating a child cgroup needs root";
  const std::string name = "mcp-control-test-" + std::to_string(::getpid());
  const fs::path child = mount / name;
  if (::mkdir(child.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create " << child << ": " << std::strerror(errno);
  }
  const uint64_t id = resolve_cgroup_id(name, mount);
  struct {
    struct file_handle fh;
    unsigned char bytes[64];
  } handle{};
  handle.fh.handle_bytes = sizeof(handle.bytes);
  int mount_id = 0;
  const int rc = ::name_to_handle_at(AT_FDCWD, child.c_str(), &handle.fh, &mount_id, 0);
  ::rmdir(child.c_str());
  ASSERT_EQ(rc, 0) << std::strerror(errno);
  ASSERT_EQ(handle.fh.handle_bytes, 8u);
  uint64_t kernel_id = 0;
  std::memcpy(&kernel_id, handle.fh.f_handle, 8);
  EXPECT_EQ(id, kernel_id);
}

TEST(CgroupDepth, CountsComponentsBelowTheMountWhateverTheSpelling) {
  FakeCgroupTree tree;
  const fs::path dir = tree.add("a/b");
  EXPECT_EQ(cgroup_depth("a/b", tree.root()), 2u);
  EXPECT_EQ(cgroup_depth("/a/b/", tree.root()), 2u);
  EXPECT_EQ(cgroup_depth(dir.string(), tree.root()), 2u);
  EXPECT_EQ(cgroup_depth(tree.root().string(), tree.root()), 0u);
}

}  // namespace
}  // namespace mcp::cgroup
