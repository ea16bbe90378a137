// BrokerProcess: runs build/bin/mcp-broker as a child on 127.0.0.1 (port 0 unless a port is
// given, to restart on the same one), reads the bound port from its stderr line
// "mcp-broker: listening on HOST:PORT", and kills it (SIGKILL or SIGTERM) on demand. Args with
// their own --listen replace the loopback default. run_broker() runs one to its exit instead.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mcp::test {

inline std::filesystem::path make_temp_dir(const std::string& stem) {
  auto dir = std::filesystem::temp_directory_path() /
             (stem + "-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  return dir;
}

// The mcp-broker under test: this build's, or $MCP_BROKER_BIN (benchmarks compare builds).
inline std::string broker_binary() {
  const char* other = std::getenv("MCP_BROKER_BIN");
  return other != nullptr && *other != '\0' ? other : std::string(MCP_BIN_DIR) + "/mcp-broker";
}

class BrokerProcess {
 public:
  BrokerProcess(std::vector<std::string> args, std::filesystem::path log, int port = 0)
      : log_(std::move(log)) {
    const auto listen = std::find(args.begin(), args.end(), "--listen");
    if (listen == args.end())
      args.insert(args.begin(), {"--listen", "127.0.0.1:" + std::to_string(port)});
    else if (listen + 1 != args.end() && (listen + 1)->starts_with("unix:"))
      unix_ = *(listen + 1);  // the same address across restarts
    args.insert(args.begin(), broker_binary());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log_.c_str(), "w");
      if (f) dup2(fileno(f), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    const std::regex re("listening on [0-9.]+:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = log_text();
      if (!unix_.empty() && text.find("listening on " + unix_) != std::string::npos) return;
      if (std::regex_search(text, m, re)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("mcp-broker exited early: " + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("mcp-broker did not report its port: " + log_text());
  }
  ~BrokerProcess() { stop(SIGKILL); }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return unix_.empty() ? "127.0.0.1:" + std::to_string(port_) : unix_; }
  std::string log_text() const {
    std::ifstream in(log_);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Returns the exit status (as from waitpid), or -1 when not running.
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string unix_;  // --listen unix:PATH
};

// Runs mcp-broker with `args` until it exits by itself (e.g. refusing to start); returns the
// exit code and sets *stderr_text, or kills it and returns -1 when it still runs after `limit`.
inline int run_broker(const std::vector<std::string>& args, const std::filesystem::path& log,
                      std::string* stderr_text,
                      std::chrono::milliseconds limit = std::chrono::seconds(15)) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) dup2(fileno(f), 2);
    std::vector<std::string> all{broker_binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool exited = false;
  while (!(exited = waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  std::ifstream in(log);
  std::ostringstream s;
  s << in.rdbuf();
  *stderr_text = s.str();
  return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mcp::test
