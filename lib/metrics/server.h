// The agent's self-observability endpoint on cpp-httplib:
//   GET /healthz  200 "ok" while the health check passes, 503 with its reason otherwise
//   GET /metrics  the registry in Prometheus text format 0.0.4
// Contract:
//  - start() binds synchronously (a busy port or bad address throws mcp::Error runtime
//    before any thread exists), then serves from a background thread; port() is the bound
//    port, useful when the configured port is 0.
//  - stop() (and the destructor) closes the listener and joins every server thread;
//    idempotent. Serving uses a small fixed pool so a scraper cannot grow the agent's
//    thread count.
//  - The health check and the registry's collectors run on server threads; they must be
//    thread-safe. Neither is called on any other path.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "metrics/registry.h"

namespace httplib {
class Server;
}

namespace mcp::metrics {

inline constexpr std::string_view kDefaultHost = "127.0.0.1";
inline constexpr int kDefaultPort = 9464;

struct ListenAddress {
  std::string host{kDefaultHost};
  int port = kDefaultPort;  // 0 = pick a free port
};

// Parses "HOST:PORT", ":PORT" (host 127.0.0.1) or "[v6]:PORT"; throws mcp::Error (usage)
// naming the text when it is malformed or the port is outside 0..65535.
ListenAddress parse_listen_address(std::string_view text);

struct HealthStatus {
  bool healthy = true;
  std::string reason;  // shown with 503 when unhealthy; when healthy, details after "ok\n"
};
using HealthCheck = std::function<HealthStatus()>;

class MetricsServer {
 public:
  // `registry` must outlive the server. An empty `health` check always reports healthy.
  MetricsServer(const Registry& registry, HealthCheck health, ListenAddress address = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void start();
  void stop();
  bool running() const;
  int port() const { return bound_port_; }  // valid after start()
  const std::string& host() const { return address_.host; }

 private:
  const Registry& registry_;
  HealthCheck health_;
  ListenAddress address_;
  int bound_port_ = -1;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace mcp::metrics
