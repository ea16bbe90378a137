// Test support: cgroups made under the cgroup2 mount for one test and removed with it
// (deepest first; the test must have let the processes it moved in exit). Header-only.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cgroup/cgroup2.h"

namespace mcp::test {

class CgroupTree {
 public:
  // The tree's root is <cgroup2 mount>/<name>; throws mcp::Error when there is no cgroup2 mount.
  explicit CgroupTree(const std::string& name)
      : mount_(cgroup::find_cgroup2_mount()), rel_("/" + name) {
    add("");
  }
  ~CgroupTree() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) rmdir(it->c_str());
  }
  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

  // Makes <root>/<path> and every missing directory on the way; returns its full path.
  std::filesystem::path add(const std::string& path) {
    std::filesystem::path step = root();
    auto make = [&] {
      if (std::filesystem::exists(step)) return;
      std::filesystem::create_directory(step);
      made_.push_back(step);
    };
    make();
    for (const auto& part : std::filesystem::path(path)) {
      step /= part;
      make();
    }
    return step;
  }
  const std::filesystem::path& mount() const { return mount_; }
  // The root as /proc/PID/cgroup writes paths: relative to the mount, with a leading '/'.
  const std::string& relative_root() const { return rel_; }
  std::filesystem::path root() const { return mount_ / rel_.substr(1); }

 private:
  std::filesystem::path mount_;
  std::string rel_;
  std::vector<std::filesystem::path> made_;
};

// Makes `tree` (a std::unique_ptr<CgroupTree>) a tree named PREFIX<pid>, or skips the test when
// there is no cgroup2 mount.
#define MCP_CGROUP_TREE_OR_SKIP(tree, prefix)                                               \
  do {                                                                                      \
    try {                                                                                   \
      tree = std::make_unique<::mcp::test::CgroupTree>(prefix + std::to_string(getpid())); \
    } catch (const std::exception& e) {                                                     \
      GTEST_SKIP() << "no cgroup2 mount: " << e.what();                                     \
    }                                                                                       \
  } while (0)

// Forks a child that moves itself into `cgroup`, then execs argv (stdout to /dev/null).
// Exit 126: the move failed; 127: the exec did.
inline pid_t spawn_in_cgroup(const std::filesystem::path& cgroup, const std::vector<std::string>& argv) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string me = std::to_string(getpid());
    const int fd = open((cgroup / "cgroup.procs").c_str(), O_WRONLY);
    if (fd < 0 || write(fd, me.c_str(), me.size()) < 0) _exit(126);
    close(fd);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// The exit code of a child (128 + signal when killed).
inline int wait_exit(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace mcp::test
