// Test support: a child process (the agent, a workload) running while the test acts on it:
// stdout and stderr go to files, readiness is a line on stderr waited for with a deadline,
// signals are sent on demand. And a blackhole: a TCP listener on 127.0.0.1:0 that accepts
// connections and never answers, a broker that never speaks gRPC; and a port that refuses.
// Header-only.
#pragma once
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"

namespace mcp::test {

class Process {
 public:
  // argv[0] is a path; `env` entries ("K=V") are added to the inherited environment.
  Process(std::vector<std::string> argv, const std::filesystem::path& dir, const std::string& name,
          std::vector<std::string> env = {})
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen(out_.c_str(), "w", stdout) || !freopen(err_.c_str(), "w", stderr)) _exit(126);
      for (auto& e : env) putenv(e.data());
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }

  // Polls stderr until `re` matches (true) or the limit passes or the process exits (false).
  bool wait_for_err(const std::regex& re, std::chrono::milliseconds limit, std::smatch* match = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      text_ = err();  // a member: the match points into it
      std::smatch m;
      if (std::regex_search(text_, m, re)) {
        if (match) *match = m;
        return true;
      }
      if (exited() || std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }

  // Exit code (128 + signal when killed), or nullopt when still running after `limit`.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!exited()) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }

 private:
  bool exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return true;
  }

  std::filesystem::path out_, err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string text_;
};

// A TCP socket bound to 127.0.0.1:0, listening or not; closed with the object.
class LoopbackSocket {
 public:
  explicit LoopbackSocket(bool listening) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        (listening && listen(fd_, 64) != 0) || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot bind 127.0.0.1:0");
    port_ = ntohs(a.sin_port);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  ~LoopbackSocket() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Accepts TCP connections on 127.0.0.1:0 (the kernel completes the handshake from the
// backlog) and never reads or writes: gRPC's HTTP/2 handshake never finishes.
class BlackholeListener : public LoopbackSocket {
 public:
  BlackholeListener() : LoopbackSocket(true) {}
};

// A port nothing listens on: bound (so no one else gets it) but not listening, so a connection
// is refused at once.
class RefusingPort : public LoopbackSocket {
 public:
  RefusingPort() : LoopbackSocket(false) {}
};

}  // namespace mcp::test
