#include "metrics/server.h"

// poll, not select: the agent raises its descriptor limit (main.cpp), and select cannot watch a
// descriptor past 1023.
#define CPPHTTPLIB_USE_POLL
#include <httplib.h>

#include <charconv>
#include <chrono>

#include <sys/socket.h>

#include "common/error.h"

namespace mcp::metrics {

namespace {
// Two workers: one for a scraper and one for a liveness probe; more would only add
// threads to a process whose job is to stay small.
constexpr size_t kServerThreads = 2;
}  // namespace

ListenAddress parse_listen_address(std::string_view text) {
  auto bad = [&](const char* why) {
    return usage_error("bad listen address '" + std::string(text) + "': " + why);
  };
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) throw bad("expected HOST:PORT");
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.starts_with('[')) {
    if (!host.ends_with(']') || host.size() < 3) throw bad("unbalanced brackets");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    throw bad("IPv6 hosts need brackets, e.g. [::1]:9464");
  }
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    throw bad("port must be a number in 0..65535");
  }
  ListenAddress out;
  out.host = host.empty() ? std::string(kDefaultHost) : std::string(host);
  out.port = port;
  return out;
}

MetricsServer::MetricsServer(const Registry& registry, HealthCheck health, ListenAddress address)
    : registry_(registry), health_(std::move(health)), address_(std::move(address)) {}

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::running() const { return server_ && server_->is_running(); }

void MetricsServer::start() {
  if (server_) throw runtime_error("metrics server already started");
  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  server->set_keep_alive_timeout(5);
  // httplib's default sets SO_REUSEPORT, which would let a second agent bind the same port
  // and silently take half the scrapes; keep only SO_REUSEADDR (fast restart after a crash).
  server->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  server->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    HealthStatus st;
    if (health_) {
      try {
        st = health_();
      } catch (const std::exception& e) {
        st = {false, std::string("health check failed: ") + e.what()};
      }
    }
    if (st.healthy) {
      res.status = 200;
      res.set_content(st.reason.empty() ? std::string("ok") : "ok\n" + st.reason, "text/plain; charset=utf-8");
    } else {
      res.status = 503;
      res.set_content(st.reason.empty() ? "unhealthy" : st.reason, "text/plain; charset=utf-8");
    }
  });
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_.render(), std::string(kContentType).c_str());
  });

  int port = address_.port;
  bool bound = false;
  if (port == 0) {
    port = server->bind_to_any_port(address_.host);
    bound = port > 0;
  } else {
    bound = server->bind_to_port(address_.host, port);
  }
  if (!bound) {
    throw runtime_error("metrics server cannot listen on " + address_.host + ":" +
                        std::to_string(address_.port) + " (address in use or not local?)");
  }
  bound_port_ = port;
  server_ = std::move(server);
  thread_ = std::thread([s = server_.get()] { s->listen_after_bind(); });
  // stop() only closes the listener once the loop runs; wait for it so a stop() right
  // after start() cannot leave the thread blocked in accept() forever.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server_->is_running()) {
    stop();
    throw runtime_error("metrics server thread did not start");
  }
}

void MetricsServer::stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace mcp::metrics
