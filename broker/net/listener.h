// Listener: the broker's own TCP accept loop in front of gRPC (issue 51, finding 1). gRPC 1.51's
// posix listener gives up for good after one accept() that fails with EMFILE (retrying came in
// gRPC 1.53): idle connections that ran the broker out of descriptors left it running, /healthz
// 200, and unreachable after they closed. Here the broker binds and accepts, and hands each
// connection to gRPC (ServerBuilder's external connection acceptor: the same credentials,
// handshake deadline and limits as a port of gRPC's own), so that:
// - a new connection is refused (accepted and closed at once) while the process holds more than
//   its descriptor limit less a reserve for its own files (journal segments, state files, NATS,
//   OTLP, /metrics scrapes): accept() always has a descriptor left and so do those;
// - an accept() that fails anyway (ENFILE, ENOMEM, an EMFILE a burst elsewhere caused) is
//   retried after a pause, never the end of accepting;
// - health() says while connections are refused, and why (/healthz answers 503 then).
// A unix socket stays gRPC's: gRPC 1.51 cannot take an accepted unix connection from outside
// (it drops one whose peer has no name), and only its owner and group may connect to it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mcp::broker {

// Open descriptors of this process (/proc/self/fd).
size_t open_descriptors();
// Descriptors the broker keeps for itself below a limit of `limit`: an eighth, 32 to 1024.
size_t descriptor_reserve(size_t limit);

struct ListenerHealth {
  bool ok = true;
  std::string reason;  // why new connections are refused
};

// Not ok while this process holds more than its limit less the reserve: a Listener refuses
// connections then, and gRPC's own listener (a unix socket) is about to stop for good.
ListenerHealth descriptor_health();

class Listener {
 public:
  // Gets each accepted connection (non-blocking, close-on-exec); it owns the descriptor then.
  using HandOff = std::function<void(int listen_fd, int fd)>;

  // Binds every address "HOST:PORT" resolves to ("[V6]:PORT"; port 0: one free port for all).
  // Throws mcp::Error (runtime) when it cannot.
  explicit Listener(const std::string& listen);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  void start(HandOff hand_off);
  // Stops accepting and closes the listening sockets; idempotent.
  void stop();
  ListenerHealth health() const;

 private:
  void run();
  bool admit(int fd);
  void failed(int error);

  std::vector<int> fds_;
  int wake_ = -1;  // eventfd: stop()
  int port_ = 0;
  HandOff hand_off_;
  std::thread thread_;
  std::atomic<uint64_t> refused_{0};

  mutable std::mutex mu_;  // guards the two below
  std::string accept_error_;  // the last accept() failure, until one succeeds
  std::chrono::steady_clock::time_point accept_error_at_;
};

}  // namespace mcp::broker
