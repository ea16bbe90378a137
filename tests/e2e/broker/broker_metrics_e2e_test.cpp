// mcp-broker --metrics-listen: a real broker process, batches published with the test client,
// /metrics scraped over HTTP and checked against what was sent, `promtool check metrics` on the
// page, and a real `prometheus` server scraping it and answering PromQL.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <regex>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/grafana_dashboard.h"
#include "../../support/prometheus.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::sample_value;
using test::wait_until;

constexpr uint64_t kQuarter = uint64_t{1} << 62;  // threshold for p = 0.25, weight 4

// `n` v1 samples of (service, probe) at threshold `threshold`.
void add_samples(mcp::v1::AgentMessage& m, const std::string& service, const std::string& probe, int n,
                 uint64_t threshold) {
  for (int i = 0; i < n; ++i) {
    auto* s = m.mutable_batch()->add_samples();
    s->set_service(service);
    s->set_probe(probe);
    s->set_threshold(threshold);
    s->add_args(static_cast<uint64_t>(i));
  }
}

int metrics_port(const BrokerProcess& b) { return test::metrics_port_in_log(b.log_text()); }
std::string scrape(int port) { return test::scrape_metrics(port); }

class BrokerMetricsE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("mcp-broker-metrics"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Publishes, as agent "node-1": 2 batches (one replayed once), checkout/handle 5 events at
  // p = 1 and 4 at p = 0.25 (adjusted 5 + 16), search/query 3 at p = 1 and the agent's interval
  // counts for checkout/handle (seen 1000, estimate 990.5). Then a Publish with no agent id.
  void publish_known_batches(const std::string& address) {
    mcp::v1::AgentMessage first;
    first.mutable_batch()->set_sequence(1);
    add_samples(first, "checkout", "handle", 5, UINT64_MAX);
    add_samples(first, "checkout", "handle", 4, kQuarter);
    auto* counts = first.mutable_batch()->add_counts();
    counts->set_service("checkout");
    counts->set_probe("handle");
    counts->set_seen(1000);
    counts->set_estimate(990.5);
    mcp::v1::AgentMessage second;
    second.mutable_batch()->set_sequence(2);
    add_samples(second, "search", "query", 3, UINT64_MAX);
    const auto r = test::publish_messages(address, {test::hello_message("node-1"), first, second, second});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_EQ(r.acks.size(), 3u);
    const auto refused = test::publish_messages(address, {test::batch_message(1, 1)});
    ASSERT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  std::filesystem::path dir_;
};

TEST_F(BrokerMetricsE2E, ScrapeReportsWhatWasPublishedAndPromtoolAcceptsIt) {
  BrokerProcess broker({"--metrics-listen", "127.0.0.1:0"}, dir_ / "broker.log");
  const int port = metrics_port(broker);
  ASSERT_GT(port, 0) << broker.log_text();
  publish_known_batches(broker.address());
  mcp::v1::SubscriptionRequest req;
  test::RawSubscriber subscriber(broker.address(), req);
  ASSERT_TRUE(wait_until([&] { return sample_value(scrape(port), "mcp_broker_subscribers") == 1; }, 10s))
      << scrape(port);

  const std::string page = scrape(port);
  EXPECT_EQ(sample_value(page, "mcp_broker_batches_total"), 2) << page;
  EXPECT_EQ(sample_value(page, "mcp_broker_duplicate_batches_total"), 1) << page;
  EXPECT_EQ(sample_value(page, "mcp_broker_refused_publishes_total"), 1) << page;
  EXPECT_EQ(sample_value(page, "mcp_broker_agents_connected"), 0) << page;
  EXPECT_EQ(sample_value(page, "mcp_broker_subscriber_dropped_packets_total"), 0) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_events_total{probe="handle",service="checkout"})"), 9) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_events_total{probe="query",service="search"})"), 3) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_adjusted_count_total{probe="handle",service="checkout"})"), 21) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_adjusted_count_total{probe="query",service="search"})"), 3) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_probe_seen_total{probe="handle",service="checkout"})"), 1000) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_corrected_count_total{probe="handle",service="checkout"})"), 990.5)
      << page;
  // The same numbers as the Stats RPC.
  const auto stats = test::broker_stats(broker.address());
  EXPECT_EQ(stats.batches(), 2u);
  EXPECT_EQ(stats.duplicate_batches(), 1u);

  if (!test::has_prometheus()) GTEST_SKIP() << "promtool not installed (scripts/setup installs prometheus)";
  const auto check = test::promtool_check_metrics(page);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << page;
  EXPECT_EQ(check.out + check.err, "");
}

// Estimated error rate: failed calls (ret < 0) add their adjusted counts to
// mcp_broker_error_adjusted_count_total. Series are bounded: past --max-probe-series pairs, a new
// (service, probe) is counted as _other, and its events in the overflow counter.
TEST_F(BrokerMetricsE2E, ErrorAdjustedCountsAndTheBoundOnProbeSeries) {
  BrokerProcess broker({"--metrics-listen", "127.0.0.1:0", "--max-probe-series", "2"}, dir_ / "broker.log");
  const int port = metrics_port(broker);
  ASSERT_GT(port, 0) << broker.log_text();
  mcp::v1::AgentMessage batch;
  batch.mutable_batch()->set_sequence(1);
  add_samples(batch, "checkout", "handle", 4, kQuarter);   // 4 failed calls at p = 0.25: 16
  add_samples(batch, "checkout", "handle", 2, UINT64_MAX);  // 2 good ones
  for (int i = 0; i < 6; ++i) {
    auto* s = batch.mutable_batch()->mutable_samples(i);
    s->set_kind("syscall");
    s->set_has_ret(true);
    s->set_ret(i < 4 ? -11 : 0);
  }
  add_samples(batch, "search", "query", 3, UINT64_MAX);
  add_samples(batch, "third", "probe", 5, UINT64_MAX);  // past the bound of 2 pairs
  const auto r = test::publish_messages(broker.address(), {test::hello_message("node-e"), batch});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const std::string page = scrape(port);
  EXPECT_EQ(sample_value(page, R"(mcp_broker_adjusted_count_total{probe="handle",service="checkout"})"), 18) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_error_adjusted_count_total{probe="handle",service="checkout"})"), 16)
      << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_error_adjusted_count_total{probe="query",service="search"})"), 0) << page;
  EXPECT_EQ(sample_value(page, R"(mcp_broker_events_total{probe="_other",service="_other"})"), 5) << page;
  EXPECT_EQ(sample_value(page, "mcp_broker_probe_series_overflow_total"), 5) << page;
  EXPECT_EQ(page.find("service=\"third\""), std::string::npos) << page;
  EXPECT_EQ(test::broker_stats(broker.address()).probe_series_overflow(), 5u);
}

TEST_F(BrokerMetricsE2E, HealthzAnswersAndNoMetricsListenerWithoutTheFlag) {
  BrokerProcess with({"--metrics-listen", "127.0.0.1:0"}, dir_ / "with.log");
  auto res = httplib::Client("127.0.0.1", metrics_port(with)).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  BrokerProcess without({}, dir_ / "without.log");
  EXPECT_EQ(without.log_text().find("metrics on"), std::string::npos) << without.log_text();
}

TEST_F(BrokerMetricsE2E, BadMetricsAddressIsAUsageErrorAndABusyPortARuntimeError) {
  std::string err;
  EXPECT_EQ(test::run_broker({"--listen", "127.0.0.1:0", "--metrics-listen", "9464"}, dir_ / "bad.log", &err), 2);
  EXPECT_NE(err.find("mcp-broker: bad listen address '9464'"), std::string::npos) << err;

  BrokerProcess first({"--metrics-listen", "127.0.0.1:0"}, dir_ / "first.log");
  const std::string busy = "127.0.0.1:" + std::to_string(metrics_port(first));
  EXPECT_EQ(test::run_broker({"--listen", "127.0.0.1:0", "--metrics-listen", busy}, dir_ / "busy.log", &err), 1);
  EXPECT_NE(err.find("metrics server cannot listen on " + busy), std::string::npos) << err;
}

// A real Prometheus scrapes the broker; PromQL over its HTTP API sees the published counts:
// the estimated calls (sum of adjusted counts) per service, as the dashboard queries them.
TEST_F(BrokerMetricsE2E, PrometheusScrapesTheBrokerAndPromQLSeesTheAdjustedCounts) {
  if (!test::has_prometheus()) GTEST_SKIP() << "prometheus not installed (scripts/setup installs it)";
  BrokerProcess broker({"--metrics-listen", "127.0.0.1:0"}, dir_ / "broker.log");
  publish_known_batches(broker.address());
  test::PrometheusServer prom({{"mcp-broker", "127.0.0.1:" + std::to_string(metrics_port(broker))}}, dir_ / "prom");
  const auto adjusted = prom.wait_value(R"(sum by (service) (mcp_broker_adjusted_count_total{service="checkout"}))",
                                        [](double v) { return v == 21; });
  EXPECT_EQ(adjusted, 21) << prom.log();
  EXPECT_EQ(prom.value(R"(mcp_broker_batches_total{job="mcp-broker"})"), 2);
  EXPECT_EQ(prom.value(R"(up{job="mcp-broker"})"), 1);

  // The dashboard's broker panels (packaging/grafana/mcp-sampling.json), as Grafana would send
  // them: each evaluates, and the estimated call rate rises once more calls are published.
  mcp::v1::AgentMessage more;
  more.mutable_batch()->set_sequence(1);
  add_samples(more, "checkout", "handle", 4, kQuarter);
  ASSERT_TRUE(test::publish_messages(broker.address(), {test::hello_message("node-2"), more}).status.ok());
  const auto queries = test::dashboard_queries(test::load_dashboard());
  const test::DashboardQuery* call_rate = nullptr;
  for (const auto& q : queries) {
    if (q.panel == "Estimated call rate per service and probe") call_rate = &q;
    if (!std::all_of(q.metrics.begin(), q.metrics.end(), [](const auto& m) { return m.starts_with("mcp_broker_"); }))
      continue;
    const auto answer = prom.query_answer(q.promql);
    EXPECT_EQ(answer.value("status", ""), "success") << q.panel << ": " << q.promql << "\n" << answer.dump();
  }
  ASSERT_NE(call_rate, nullptr) << "the dashboard lost its estimated call rate panel";
  double rate = 0;
  EXPECT_TRUE(wait_until([&] {
    for (const auto& series : prom.query(call_rate->promql))
      if (series["metric"].value("service", "") == "checkout") rate = std::stod(series["value"][1].get<std::string>());
    return rate > 0;
  }, 30s)) << call_rate->promql << "\n" << prom.query(call_rate->promql).dump();
}

}  // namespace
}  // namespace mcp
