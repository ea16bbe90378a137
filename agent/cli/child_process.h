// ChildProcess: runs `-- COMMAND ARGS...` the way `bpftrace -c` does: forked at
// once but held before exec until the probes are attached, so its first call is
// traced. Exec failures come back as an error, not as a silent exit code.
#pragma once
#include <sys/types.h>

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
  // Lets the child exec; throws mcp::Error (runtime) when exec fails.
  void start();
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
