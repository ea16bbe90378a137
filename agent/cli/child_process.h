// ChildProcess: runs `-- COMMAND ARGS...` the way `bpftrace -c` does: forked at
// once but held before exec until the probes are attached, so its first call is
// traced. Exec failures come back as an error, not as a silent exit code.
#pragma once
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mcp::cli {

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();  // terminates and reaps a child still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Lets the child exec; throws mcp::Error (runtime) when exec fails. With `at_exec`, the
  // child stops once exec has mapped the program and before its first instruction, and
  // at_exec(pid) runs then (to read what only a live process shows, such as its mappings,
  // of a program that may exit within a millisecond). Where ptrace is not allowed the child
  // is not stopped and at_exec runs as soon as exec returns.
  void start(const std::function<void(pid_t)>& at_exec = {});
  // Exit status once it has exited (non-blocking); nullopt while running.
  std::optional<int> poll_exit();
  void terminate();

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1;     // parent writes to release the child
  int err_fd_ = -1;    // child writes errno if exec fails (CLOEXEC: EOF on success)
  std::string name_;
  std::optional<int> status_;
};

}  // namespace mcp::cli
