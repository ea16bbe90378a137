// TcpProxy: forwards TCP connections from a port on 127.0.0.1 to another, so a test can cut a
// link (a leaf node between two NATS clusters) and restore it without touching either end.
// cut() closes every forwarded connection and refuses new ones (accepted, then closed at once,
// as a dead network looks to a client that retries); restore() forwards again. One thread,
// poll(2) over every socket. Header-only test support.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>

#include "process.h"

namespace mcp::test {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_(target_port), thread_([this] { run(); }) {}
  ~TcpProxy() {
    stop_ = true;
    thread_.join();
    for (auto& [a, b] : pairs_) close(a), close(b);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return listener_.port(); }
  void cut() { cut_ = true; }
  void restore() { cut_ = false; }
  size_t connections() const { return live_.load(); }

 private:
  int connect_target() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_));
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
  }

  void run() {
    std::vector<char> buf(64 * 1024);
    while (!stop_) {
      if (cut_ && !pairs_.empty()) {
        for (auto& [a, b] : pairs_) close(a), close(b);
        pairs_.clear();
      }
      live_ = pairs_.size();
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      for (auto& [a, b] : pairs_) fds.push_back({a, POLLIN, 0}), fds.push_back({b, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int client = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        const int server = client >= 0 && !cut_ ? connect_target() : -1;
        if (server >= 0)
          pairs_.emplace_back(client, server);
        else if (client >= 0)
          close(client);
      }
      std::vector<size_t> dead;
      for (size_t i = 0; i < pairs_.size(); ++i) {
        const auto [a, b] = pairs_[i];
        for (const auto& [from, to, revents] : {std::tuple{a, b, fds[1 + 2 * i].revents}, std::tuple{b, a, fds[2 + 2 * i].revents}}) {
          if (!(revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const ssize_t n = read(from, buf.data(), buf.size());
          bool ok = n > 0;
          for (ssize_t off = 0; ok && off < n;) {
            const ssize_t w = write(to, buf.data() + off, static_cast<size_t>(n - off));
            ok = w > 0;
            off += w > 0 ? w : 0;
          }
          if (!ok) {
            dead.push_back(i);
            break;
          }
        }
      }
      for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
        close(pairs_[*it].first);
        close(pairs_[*it].second);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(*it));
      }
    }
  }

  const int target_;
  LoopbackSocket listener_{true};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<size_t> live_{0};
  std::vector<std::pair<int, int>> pairs_;  // (client, target), the proxy thread's only
  std::thread thread_;
};

}  // namespace mcp::test
