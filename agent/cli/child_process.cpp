#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/fd_limit.h"

namespace mcp::cli {
namespace {
// The byte that releases the child: exec, or stop at exec for start()'s at_exec.
constexpr char kGo = 1, kGoTraced = 2;
}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv) : name_(argv.at(0)) {
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) throw runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    close(go[1]);
    close(err[0]);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the agent
    signal(SIGPIPE, SIG_DFL);
    restore_fd_limit();
    char c;
    if (read(go[0], &c, 1) != 1) _exit(127);
    // Asked to stop at exec (start's at_exec): a tracer stops us there; -1 says it could not.
    if (c == kGoTraced && ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
      const int untraced = -1;
      (void)!write(err[1], &untraced, sizeof(untraced));
    }
    execvp(args[0], args.data());
    int e = errno;
    (void)!write(err[1], &e, sizeof(e));
    _exit(127);
  }
  close(go[0]);
  close(err[1]);
  go_fd_ = go[1];
  err_fd_ = err[0];
}

ChildProcess::~ChildProcess() {
  if (go_fd_ >= 0) close(go_fd_);
  if (err_fd_ >= 0) close(err_fd_);
  if (!status_) {
    terminate();
    int st;
    waitpid(pid_, &st, 0);
  }
}

void ChildProcess::start(const std::function<void(pid_t)>& at_exec) {
  char c = at_exec ? kGoTraced : kGo;
  (void)!write(go_fd_, &c, 1);
  close(go_fd_);
  go_fd_ = -1;
  bool traced = static_cast<bool>(at_exec);
  int e = 0;
  ssize_t n;
  for (;;) {
    do n = read(err_fd_, &e, sizeof(e)); while (n < 0 && errno == EINTR);
    if (n != sizeof(e) || e != -1) break;
    traced = false;  // ptrace refused: the child runs on, unstopped
  }
  close(err_fd_);
  err_fd_ = -1;
  if (n == sizeof(e)) {
    int st;
    waitpid(pid_, &st, 0);
    status_ = 127;
    throw runtime_error("cannot run " + name_ + ": " + std::strerror(e));
  }
  if (!at_exec) return;
  if (traced) {
    int st;
    pid_t w;
    do w = waitpid(pid_, &st, 0); while (w < 0 && errno == EINTR);
    if (w == pid_ && !WIFSTOPPED(st)) {  // gone already (killed)
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return;
    }
  }
  try {
    at_exec(pid_);
  } catch (...) {
    if (traced) ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);  // never left stopped
    throw;
  }
  if (traced) ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
}

std::optional<int> ChildProcess::poll_exit() {
  if (status_) return status_;
  int st;
  if (waitpid(pid_, &st, WNOHANG) == pid_)
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

void ChildProcess::terminate() {
  if (!status_ && pid_ > 0) kill(pid_, SIGTERM);
}

}  // namespace mcp::cli
