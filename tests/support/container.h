// Test support: a "container" without a container runtime: a child process in its own mount
// namespace (propagation private, so nothing it mounts reaches the host) with host
// directories bind-mounted over paths, in a cgroup of the test's choosing (a kubelet-layout
// one, tests/support/cgroup.h, makes it a pod's container to the agent). The constructor
// returns once the child is set up (its "ready" pipe); the child then waits for go() before it
// execs the command, so a test decides when the traced calls happen. Header-only.
#pragma once
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "cgroup.h"

namespace mcp::test {

class FakeContainer {
 public:
  struct Bind {
    std::filesystem::path source, target;  // directories; target exists on the host
  };

  // argv[0]: a path as the container sees it. Throws std::runtime_error naming the setup step
  // that failed (the child's exit code says which).
  FakeContainer(const std::filesystem::path& cgroup, const std::vector<Bind>& binds, std::vector<std::string> argv) {
    // Everything the child uses is built here: after fork() only system calls run.
    const std::string procs = (cgroup / "cgroup.procs").string();
    std::vector<std::pair<std::string, std::string>> mounts;
    for (const auto& b : binds) mounts.emplace_back(b.source.string(), b.target.string());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(go[1]);
      const int fd = open(procs.c_str(), O_WRONLY);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(121);  // "0": the writing process itself
      close(fd);
      if (unshare(CLONE_NEWNS) != 0) _exit(122);
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(123);
      for (const auto& [source, target] : mounts)
        if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) _exit(124);
      char byte = 1;
      if (write(ready[1], &byte, 1) != 1) _exit(125);
      if (read(go[0], &byte, 1) != 1) _exit(0);  // the test gave up: leave without running
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, STDOUT_FILENO);
      execv(args[0], args.data());
      _exit(127);
    }
    close(ready[1]);
    close(go[0]);
    go_ = go[1];
    char byte = 0;
    const bool up = pid_ > 0 && read(ready[0], &byte, 1) == 1;
    close(ready[0]);
    if (!up) {
      const int code = pid_ > 0 ? wait_exit(std::exchange(pid_, -1)) : -1;
      close(std::exchange(go_, -1));
      throw std::runtime_error("fake container setup failed (child exit " + std::to_string(code) +
                               ": 121 cgroup, 122 unshare, 123 private mounts, 124 bind mount)");
    }
  }
  ~FakeContainer() {
    if (go_ >= 0) close(go_);  // a child still waiting leaves without running
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  FakeContainer(const FakeContainer&) = delete;
  FakeContainer& operator=(const FakeContainer&) = delete;

  pid_t pid() const { return pid_; }
  // Lets the child exec its command.
  void go() {
    const char byte = 1;
    if (go_ >= 0 && write(go_, &byte, 1) == 1) close(std::exchange(go_, -1));
  }
  // go(), then the command's exit code (127: the exec failed).
  int run() {
    go();
    return pid_ > 0 ? wait_exit(std::exchange(pid_, -1)) : -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
};

}  // namespace mcp::test
