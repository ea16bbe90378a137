#include "metrics/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "common/error.h"
#include "metrics/names.h"
#include "../../support/prometheus.h"

namespace mcp::metrics {
namespace {

ListenAddress any_port() { return {"127.0.0.1", 0}; }

TEST(MetricsServer, ReportsTheBoundPortWhenAskedForPortZero) {
  Registry r;
  MetricsServer s(r, nullptr, any_port());
  s.start();
  EXPECT_GT(s.port(), 0);
  EXPECT_TRUE(s.running());
  httplib::Client c("127.0.0.1", s.port());
  auto res = c.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok");
}

TEST(MetricsServer, HealthzFollowsTheHealthCheck) {
  Registry r;
  std::mutex mu;
  HealthStatus status{true, ""};
  MetricsServer s(r, [&] { std::lock_guard l(mu); return status; }, any_port());
  s.start();
  httplib::Client c("127.0.0.1", s.port());
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  {
    std::lock_guard l(mu);
    status = {false, "broker unreachable for 30s"};
  }
  auto res = c.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "broker unreachable for 30s");
  {
    std::lock_guard l(mu);
    status = {true, ""};
  }
  EXPECT_EQ(c.Get("/healthz")->status, 200);
}

TEST(MetricsServer, HealthCheckThatThrowsIsUnhealthy) {
  Registry r;
  MetricsServer s(r, []() -> HealthStatus { throw std::runtime_error("ring buffer gone"); },
                  any_port());
  s.start();
  auto res = httplib::Client("127.0.0.1", s.port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("ring buffer gone"), std::string::npos);
}

TEST(MetricsServer, MetricsServesCurrentValuesInTextFormat) {
  Registry r;
  std::atomic<uint64_t> lost{0};
  r.add_collector(kEventsLost, [&] {
    return std::vector<Sample>{{{"uprobe"}, static_cast<double>(lost.load())}};
  });
  auto& reloads = r.counter(kReloads);
  MetricsServer s(r, nullptr, any_port());
  s.start();
  httplib::Client c("127.0.0.1", s.port());

  lost = 12;
  reloads.Increment();
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), kContentType);
  EXPECT_NE(res->body.find("# TYPE mcp_events_lost_total counter\n"), std::string::npos);
  EXPECT_NE(res->body.find("mcp_events_lost_total{probe=\"uprobe\"} 12\n"), std::string::npos);
  EXPECT_NE(res->body.find("mcp_config_reloads_total 1\n"), std::string::npos);

  lost = 13;
  res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("mcp_events_lost_total{probe=\"uprobe\"} 13\n"), std::string::npos);
}

// Every agent metric, served with a value, as Prometheus's own linter reads the page.
TEST(MetricsServer, PromtoolAcceptsThePageWithEveryAgentMetric) {
  if (!test::has_prometheus()) GTEST_SKIP() << "promtool not installed (scripts/setup installs prometheus)";
  Registry r;
  for (const auto& spec : kAgentMetrics) {
    r.add_collector(spec, [&spec] {
      const size_t labels = spec_labels(spec).size();
      return std::vector<Sample>{{std::vector<std::string>(labels, "a\"b\\c"), 1},
                                 {std::vector<std::string>(labels, "x"), 2.5}};
    });
  }
  MetricsServer s(r, nullptr, any_port());
  s.start();
  auto res = httplib::Client("127.0.0.1", s.port()).Get("/metrics");
  ASSERT_TRUE(res);
  const auto check = test::promtool_check_metrics(res->body);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << res->body;
  EXPECT_EQ(check.out + check.err, "");
}

TEST(MetricsServer, UnknownPathIs404) {
  Registry r;
  MetricsServer s(r, nullptr, any_port());
  s.start();
  auto res = httplib::Client("127.0.0.1", s.port()).Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(MetricsServer, StopClosesTheListenerAndIsIdempotent) {
  Registry r;
  MetricsServer s(r, nullptr, any_port());
  s.start();
  int port = s.port();
  s.stop();
  EXPECT_FALSE(s.running());
  s.stop();
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  EXPECT_FALSE(c.Get("/healthz"));
}

// A stop racing the listener thread's start once hung the destructor: each of the 20 servers
// is destroyed right after start(), within a deadline, and its port is closed afterwards.
TEST(MetricsServer, StopRightAfterStartDoesNotHang) {
  Registry r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < 20; ++i) {
    int port = 0;
    {
      MetricsServer s(r, nullptr, any_port());
      s.start();
      port = s.port();
      ASSERT_GT(port, 0);
    }  // the destructor stops it
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stopping " << i + 1 << " servers took over 20 s";
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    EXPECT_FALSE(c.Get("/healthz")) << "server " << i << " still listens on " << port << " after it was destroyed";
  }
}

TEST(MetricsServer, BusyPortFailsStartWithARuntimeError) {
  Registry r;
  MetricsServer first(r, nullptr, any_port());
  first.start();
  MetricsServer second(r, nullptr, {"127.0.0.1", first.port()});
  try {
    second.start();
    FAIL() << "second bind on port " << first.port() << " succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
  EXPECT_FALSE(second.running());
}

TEST(ListenAddress, ParsesHostPortForms) {
  auto a = parse_listen_address("0.0.0.0:9464");
  EXPECT_EQ(a.host, "0.0.0.0");
  EXPECT_EQ(a.port, 9464);
  auto b = parse_listen_address(":0");
  EXPECT_EQ(b.host, "127.0.0.1");
  EXPECT_EQ(b.port, 0);
  auto c = parse_listen_address("[::1]:8080");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 8080);
  ListenAddress d;
  EXPECT_EQ(d.host, "127.0.0.1");
  EXPECT_EQ(d.port, 9464);
}

TEST(ListenAddress, RejectsMalformedWithUsageError) {
  for (const char* bad : {"9464", "host:", "host:65536", "host:-1", "host:12x", "::1:80", "[::1:80"}) {
    try {
      parse_listen_address(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
    }
  }
}

}  // namespace
}  // namespace mcp::metrics
