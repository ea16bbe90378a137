// mcp-broker --otlp-endpoint against an OTLP/gRPC receiver built in the test from the official
// protos (tests/support/otlp_collector.h): what arrives (spans, logs, trace ids, ot=th, adjusted
// counts, resource, CUDA, metrics, headers), a receiver answering UNAVAILABLE, and one that hangs
// while a subscriber still gets every event and the broker counts what it dropped.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <regex>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "common/event.h"
#include "../../support/compact_block.h"
#include "otlp_collector.h"
#include "prometheus.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::compact_batch_message;
using test::compact_block;
using test::OtlpCollector;
using test::publish_messages;
using test::RawSubscriber;
using test::wait_until;
namespace common = opentelemetry::proto::common::v1;

const common::AnyValue* find(const google::protobuf::RepeatedPtrField<common::KeyValue>& attrs,
                             const std::string& key) {
  for (const auto& kv : attrs)
    if (kv.key() == key) return &kv.value();
  return nullptr;
}

mcp::v1::AgentMessage hello(const std::string& agent, const std::string& host) {
  auto m = test::hello_message(agent);
  m.mutable_hello()->set_hostname(host);
  m.mutable_hello()->add_capabilities("events-v2");
  return m;
}

// The broker's shutdown line "OTLP export to ...: E events exported, F failed, D dropped, R retries".
struct ShutdownCounts {
  uint64_t exported = 0, failed = 0, dropped = 0, retries = 0;
};
bool shutdown_counts(const std::string& log, ShutdownCounts* out) {
  std::smatch m;
  const std::regex re("(\\d+) events exported, (\\d+) failed, (\\d+) dropped, (\\d+) retries");
  if (!std::regex_search(log, m, re)) return false;
  *out = {std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4])};
  return true;
}

class BrokerOtlpE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("mcp-broker-otlp"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> otlp_args(const OtlpCollector& c, const std::string& metrics = "50ms") {
    return {"--otlp-endpoint", c.address(), "--otlp-insecure", "--otlp-interval", "20ms",
            "--otlp-metrics-interval", metrics, "--otlp-header", "authorization=Bearer otlp-s3cret"};
  }
  std::filesystem::path dir_;
};

TEST_F(BrokerOtlpE2E, StoredEventsArriveAsSpansLogsAndMetrics) {
  OtlpCollector collector;
  BrokerProcess broker(otlp_args(collector), dir_ / "broker.log");

  // Block: 4 events. 0: timed uretprobe at p = 0.01 decided on trace id T; 1: timed CUDA launch,
  // keep-all; 2, 3: point syscalls (log records), 3 failing.
  mcp::v1::EventBlock b;
  const uint64_t a = probability_to_threshold(0.01);
  for (const char* s : {"", "checkout", "/srv/app:handle", "app", "syscall:openat", "cudaLaunchKernel",
                        "vec_add", "fd70a3d70a3d71", "0", "cuda:cudaLaunchKernel"})
    b.add_strings(s);
  b.add_pair_sets();
  auto add = [&](mcp::v1::EventKind kind, uint32_t probe, bool timed) {
    auto* e = b.add_events();
    e->set_kind(kind);
    e->set_ts_ns(1'700'000'000'000'000'000ull + static_cast<uint64_t>(b.events_size()));
    e->set_service(1);
    e->set_probe(probe);
    e->set_comm(3);
    e->set_pid(777);
    e->set_threshold(UINT64_MAX);
    if (timed) {
      e->set_has_duration(true);
      e->set_duration_ns(2500);
    }
    return e;
  };
  auto* sampled = add(mcp::v1::EVENT_KIND_URETPROBE, 2, true);
  sampled->set_threshold(a);
  sampled->set_trace_id(0x00aabbccddeeff11ull);
  sampled->set_th(7);
  auto* launch = add(mcp::v1::EVENT_KIND_CUDA, 9, true);
  launch->mutable_cuda()->set_api(5);
  launch->mutable_cuda()->set_kernel(6);
  for (uint32_t v : {128u, 1u, 1u}) launch->mutable_cuda()->add_grid(v);
  for (uint32_t v : {256u, 1u, 1u}) launch->mutable_cuda()->add_block(v);
  launch->mutable_cuda()->set_stream(7);
  add(mcp::v1::EVENT_KIND_SYSCALL, 4, false);
  auto* failed = add(mcp::v1::EVENT_KIND_SYSCALL, 4, false);
  failed->set_has_ret(true);
  failed->set_ret(-13);

  const auto result = publish_messages(broker.address(), {hello("agent-o", "node-7"), compact_batch_message(1, b)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_TRUE(wait_until([&] { return collector.spans() == 2 && collector.log_records() == 2; }, 10s))
      << collector.spans() << " spans, " << collector.log_records() << " logs";
  ASSERT_TRUE(wait_until([&] { return !collector.received().metrics.empty(); }, 10s));
  const auto got = collector.received();

  // Spans: the trace-id decision carries its id and OTel's exact threshold.
  std::map<std::string, opentelemetry::proto::trace::v1::Span> spans;
  for (const auto& req : got.traces)
    for (const auto& rs : req.resource_spans()) {
      const auto& r = rs.resource().attributes();
      EXPECT_EQ(find(r, "service.name")->string_value(), "checkout");
      EXPECT_EQ(find(r, "host.name")->string_value(), "node-7");
      EXPECT_EQ(find(r, "process.pid")->int_value(), 777);
      EXPECT_EQ(find(r, "process.executable.name")->string_value(), "app");
      EXPECT_EQ(find(r, "mcp.agent.id")->string_value(), "agent-o");
      for (const auto& ss : rs.scope_spans())
        for (const auto& s : ss.spans()) spans[s.name()] = s;
    }
  ASSERT_EQ(spans.count("/srv/app:handle"), 1u);
  const auto& s = spans["/srv/app:handle"];
  // T = 2^56 - (A >> 8) computed here, in 14 hex digits, trailing zeros trimmed.
  const uint64_t t = (uint64_t{1} << 56) - (a >> 8);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%014llx", static_cast<unsigned long long>(t));
  std::string th(hex);
  while (th.size() > 1 && th.back() == '0') th.pop_back();
  EXPECT_EQ(th, "fd70a3d70a3d71");
  EXPECT_EQ(s.trace_state(), "ot=th:" + th);
  EXPECT_EQ(s.trace_id(), std::string("\0\0\0\0\0\0\0\0\x00\xaa\xbb\xcc\xdd\xee\xff\x11", 16));
  EXPECT_EQ(s.end_time_unix_nano() - s.start_time_unix_nano(), 2500u);
  EXPECT_NEAR(find(s.attributes(), "sampling.adjusted_count")->double_value(), 100.0, 1e-9);
  const auto& k = spans["cuda:cudaLaunchKernel"];
  EXPECT_EQ(find(k.attributes(), "cuda.kernel.name")->string_value(), "vec_add");
  EXPECT_EQ(find(k.attributes(), "cuda.grid")->array_value().values(0).int_value(), 128);
  EXPECT_EQ(find(k.attributes(), "cuda.block")->array_value().values(0).int_value(), 256);
  EXPECT_EQ(find(k.attributes(), "cuda.stream")->int_value(), 7);
  EXPECT_EQ(find(k.attributes(), "sampling.adjusted_count")->double_value(), 1.0);

  // Logs: the point events, the failing one at ERROR.
  int errors = 0;
  for (const auto& req : got.logs)
    for (const auto& rl : req.resource_logs())
      for (const auto& sl : rl.scope_logs())
        for (const auto& l : sl.log_records()) {
          EXPECT_EQ(l.body().string_value(), "syscall:openat");
          errors += l.severity_number() == opentelemetry::proto::logs::v1::SEVERITY_NUMBER_ERROR;
        }
  EXPECT_EQ(errors, 1);

  // Headers on every call.
  for (const auto& md : got.metadata) {
    ASSERT_EQ(md.count("authorization"), 1u);
    EXPECT_EQ(md.find("authorization")->second, "Bearer otlp-s3cret");
  }

  // Metrics: estimated calls per probe from adjusted counts (100 + 1 + 1 + 1), errors 1.
  const auto& rm = got.metrics.back().resource_metrics(0);
  EXPECT_EQ(find(rm.resource().attributes(), "service.name")->string_value(), "checkout");
  double calls = 0, errs = 0;
  for (const auto& m : rm.scope_metrics(0).metrics())
    for (const auto& p : m.sum().data_points()) {
      if (m.name() == "mcp.calls.estimated") calls += p.as_double();
      if (m.name() == "mcp.errors.estimated") errs += p.as_double();
    }
  EXPECT_NEAR(calls, 103.0, 1e-9);
  EXPECT_NEAR(errs, 1.0, 1e-9);
}

TEST_F(BrokerOtlpE2E, UnavailableCollectorIsRetriedAndEveryEventExportedOnce) {
  OtlpCollector collector;
  collector.fail_next(3, grpc::StatusCode::UNAVAILABLE);
  auto args = otlp_args(collector, "0");
  args.insert(args.end(), {"--metrics-listen", "127.0.0.1:0"});
  BrokerProcess broker(args, dir_ / "broker.log");
  const auto result = publish_messages(
      broker.address(), {hello("agent-r", "node-r"), compact_batch_message(1, compact_block(30, 0))});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_TRUE(wait_until([&] { return collector.log_records() == 30; }, 15s)) << collector.log_records();
  EXPECT_EQ(collector.received().refused, 3);
  // /metrics carries the exporter's own counters (the collector saw the records before the
  // exporter counted the answer, so wait for it).
  const int port = test::metrics_port_in_log(broker.log_text());
  ASSERT_GT(port, 0) << broker.log_text();
  ASSERT_TRUE(wait_until([&] { return test::sample_value(test::scrape_metrics(port), "mcp_broker_otlp_exported_total") == 30.0; }, 10s))
      << test::scrape_metrics(port);
  const std::string page = test::scrape_metrics(port);
  EXPECT_EQ(test::sample_value(page, "mcp_broker_otlp_failed_total"), 0.0) << page;
  EXPECT_EQ(test::sample_value(page, "mcp_broker_otlp_dropped_total"), 0.0) << page;
  broker.stop(SIGTERM);
  ShutdownCounts c;
  ASSERT_TRUE(shutdown_counts(broker.log_text(), &c)) << broker.log_text();
  EXPECT_EQ(c.exported, 30u);
  EXPECT_EQ(c.retries, 3u);
  EXPECT_EQ(c.failed + c.dropped, 0u);
  EXPECT_EQ(collector.log_records(), 30u);  // once each
}

// The collector takes the connection and never answers: the subscriber still gets every event
// as published, the broker keeps acking, and what did not fit the OTLP queue is counted dropped.
TEST_F(BrokerOtlpE2E, HangingCollectorNeverHoldsBackSubscribersAndDropsAreCounted) {
  OtlpCollector collector;
  collector.hold();
  auto args = otlp_args(collector, "0");
  args.insert(args.end(), {"--otlp-queue", "50", "--otlp-batch", "20", "--otlp-timeout", "60s"});
  BrokerProcess broker(args, dir_ / "broker.log");
  mcp::v1::SubscriptionRequest req;
  req.set_compact(true);
  RawSubscriber subscriber(broker.address(), req);
  ASSERT_TRUE(wait_until([&] { return test::broker_stats(broker.address()).subscribers() == 1; }, 10s));

  constexpr int kBatches = 40, kPerBatch = 20;
  std::vector<mcp::v1::AgentMessage> messages{hello("agent-h", "node-h")};
  for (int i = 0; i < kBatches; ++i)
    messages.push_back(compact_batch_message(static_cast<uint64_t>(i + 1),
                                             compact_block(kPerBatch, static_cast<uint64_t>(i * kPerBatch))));
  const auto result = publish_messages(broker.address(), messages);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.acks.size(), static_cast<size_t>(kBatches));
  ASSERT_TRUE(wait_until([&] { return subscriber.events() == kBatches * kPerBatch; }, 15s))
      << subscriber.events();
  EXPECT_TRUE(wait_until([&] { return collector.received().held >= 1; }, 10s));
  EXPECT_EQ(collector.spans() + collector.log_records(), 0u);

  broker.stop(SIGTERM);  // grace 2 s, then the held call is cancelled
  ShutdownCounts c;
  ASSERT_TRUE(shutdown_counts(broker.log_text(), &c)) << broker.log_text();
  EXPECT_GE(c.dropped, static_cast<uint64_t>(kBatches * kPerBatch - 50 - kPerBatch));
  EXPECT_EQ(c.exported + c.failed + c.dropped, static_cast<uint64_t>(kBatches * kPerBatch));
}

TEST_F(BrokerOtlpE2E, BadOtlpFlagsAreUsageErrors) {
  std::string err;
  EXPECT_EQ(test::run_broker({"--listen", "127.0.0.1:0", "--otlp-header", "k=v"}, dir_ / "a.log", &err), 2) << err;
  EXPECT_NE(err.find("--otlp-endpoint"), std::string::npos) << err;
  EXPECT_EQ(test::run_broker({"--listen", "127.0.0.1:0", "--otlp-endpoint", "127.0.0.1:1", "--otlp-header",
                              "no-equals"},
                             dir_ / "b.log", &err),
            2)
      << err;
  EXPECT_NE(err.find("KEY=VALUE"), std::string::npos) << err;
}

}  // namespace
}  // namespace mcp
