// Test support: a scratch directory laid out like a cgroup2 tree (each cgroup directory holds
// cgroup.procs), for code that resolves cgroup paths without touching the real mount.
#pragma once
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "files.h"

namespace mcp::test {

namespace fs = std::filesystem;

class FakeCgroupTree {
 public:
  FakeCgroupTree() { dir_.write("cgroup.procs", ""); }
  fs::path add(const std::string& rel) {
    const fs::path dir = dir_ / rel;
    fs::create_directories(dir);
    write_file(dir / "cgroup.procs", "");
    return dir;
  }
  const fs::path& root() const { return dir_.path(); }

 private:
  TempDir dir_{"mcp-fake-cgroup"};
};

inline uint64_t inode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return st.st_ino;
}

}  // namespace mcp::test
