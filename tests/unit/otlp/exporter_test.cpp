// The OTLP exporter against a real OTLP/gRPC receiver on 127.0.0.1:0 (tests/support/
// otlp_collector.h, built from the official protos): delivery with headers, retries after
// UNAVAILABLE, give-up on a non-retryable answer, a collector that is down or hangs (offer
// never waits; drops are counted and the counters add up), metrics, and TLS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/event.h"
#include "otlp/exporter.h"
#include "otlp_collector.h"
#include "wait_until.h"

namespace mcp::otlp {
namespace {

using namespace std::chrono_literals;
using test::OtlpCollector;

using test::wait_until;

// `spans` timed syscalls (one failing) and `logs` point events of service "api".
std::shared_ptr<mcp::v1::EventBlock> block(int spans, int logs) {
  auto b = std::make_shared<mcp::v1::EventBlock>();
  for (const char* s : {"", "api", "syscall:openat", "app"}) b->add_strings(s);
  b->add_pair_sets();
  for (int i = 0; i < spans + logs; ++i) {
    auto* e = b->add_events();
    e->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
    e->set_ts_ns(1'700'000'000'000'000'000ull + static_cast<uint64_t>(i));
    e->set_service(1);
    e->set_probe(2);
    e->set_comm(3);
    e->set_pid(100);
    e->set_threshold(UINT64_MAX);
    e->set_event_id(static_cast<uint64_t>(i) + 1);
    e->set_has_ret(true);
    e->set_ret(i == 0 ? -2 : 3);
    if (i < spans) {
      e->set_has_duration(true);
      e->set_duration_ns(100);
    }
  }
  return b;
}

ExporterOptions plain(const std::string& endpoint) {
  ExporterOptions o;
  o.endpoint = endpoint;
  o.insecure = true;
  o.batch_interval = 10ms;
  o.initial_backoff = 5ms;
  o.max_backoff = 20ms;
  o.metrics_interval = 0ms;
  return o;
}

TEST(OtlpExporter, DeliversSpansAndLogsWithHeaders) {
  OtlpCollector collector;
  auto o = plain(collector.address());
  o.headers = {parse_header("Authorization=Bearer t0ken"), parse_header("x-tenant=lab")};
  Exporter exporter(o);
  ASSERT_TRUE(exporter.offer(block(3, 2), Origin{"agent-1", "node-a"}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().exported == 5; })) << exporter.stats().failed;
  EXPECT_EQ(collector.spans(), 3u);
  EXPECT_EQ(collector.log_records(), 2u);
  const auto got = collector.received();
  ASSERT_EQ(got.metadata.size(), 2u);  // one traces call, one logs call
  for (const auto& md : got.metadata) {
    ASSERT_EQ(md.count("authorization"), 1u);
    EXPECT_EQ(md.find("authorization")->second, "Bearer t0ken");
    EXPECT_EQ(md.find("x-tenant")->second, "lab");
  }
  const auto s = exporter.stats();
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.retries, 0u);
}

TEST(OtlpExporter, BatchesBlocksUpToTheBatchSize) {
  OtlpCollector collector;
  auto o = plain(collector.address());
  o.batch_events = 10;
  o.batch_interval = 1h;  // only the size sends
  Exporter exporter(o);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(exporter.offer(block(2, 0), Origin{}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().exported == 10; }));
  EXPECT_EQ(collector.received().traces.size(), 1u);  // five blocks, one request
}

TEST(OtlpExporter, RetriesUnavailableWithBackoffThenExports) {
  OtlpCollector collector;
  collector.fail_next(3, grpc::StatusCode::UNAVAILABLE);
  Exporter exporter(plain(collector.address()));
  ASSERT_TRUE(exporter.offer(block(4, 0), Origin{}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().exported == 4; }));
  const auto s = exporter.stats();
  EXPECT_EQ(s.retries, 3u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(collector.received().refused, 3);
  EXPECT_EQ(collector.spans(), 4u);  // delivered once
}

TEST(OtlpExporter, NonRetryableAnswerCountsFailedWithoutRetry) {
  OtlpCollector collector;
  collector.fail_next(1, grpc::StatusCode::INVALID_ARGUMENT);
  Exporter exporter(plain(collector.address()));
  ASSERT_TRUE(exporter.offer(block(2, 1), Origin{}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().failed == 3; }));
  EXPECT_EQ(exporter.stats().retries, 0u);
  EXPECT_EQ(exporter.stats().exported, 0u);
}

TEST(OtlpExporter, GivesUpAfterMaxAttempts) {
  OtlpCollector collector;
  collector.fail_next(100, grpc::StatusCode::UNAVAILABLE);
  auto o = plain(collector.address());
  o.max_attempts = 3;
  Exporter exporter(o);
  ASSERT_TRUE(exporter.offer(block(1, 0), Origin{}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().failed == 1; }));
  EXPECT_EQ(exporter.stats().retries, 2u);
  EXPECT_EQ(collector.received().refused, 3);
}

// Nobody listens: offer() keeps returning (it never waits on the network); past the queue
// bound blocks are dropped and counted, and every offered event is accounted for.
TEST(OtlpExporter, CollectorDownDropsPastTheQueueBoundAndCountsEverything) {
  std::string address;
  {
    OtlpCollector gone;
    address = gone.address();
  }
  auto o = plain(address);
  o.queue_events = 40;
  o.batch_events = 10;
  o.timeout = 200ms;
  o.max_attempts = 2;
  Exporter exporter(o);
  uint64_t offered = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    offered += 5;
    if (!exporter.offer(block(3, 2), Origin{})) refused += 5;
  }
  auto s = exporter.stats();
  EXPECT_GT(s.dropped, 0u);
  EXPECT_EQ(s.dropped, refused);
  EXPECT_LE(s.queued, 40u);
  exporter.shutdown(0ms);
  s = exporter.stats();
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.exported + s.failed + s.dropped, offered);
  EXPECT_EQ(s.queued, 0u);
}

// A collector that accepts the connection and never answers: the export call waits out its
// timeout on the exporter's thread while offer() goes on filling, then dropping.
TEST(OtlpExporter, HangingCollectorNeverBlocksOffer) {
  OtlpCollector collector;
  collector.hold();
  auto o = plain(collector.address());
  o.queue_events = 20;
  o.batch_events = 5;
  o.timeout = 30s;  // longer than the test: offer must not depend on it
  Exporter exporter(o);
  ASSERT_TRUE(exporter.offer(block(5, 0), Origin{}));
  ASSERT_TRUE(wait_until([&] { return collector.received().held == 1; }));  // in flight, held
  uint64_t accepted = 0;
  for (int i = 0; i < 100; ++i) accepted += exporter.offer(block(5, 0), Origin{}) ? 5 : 0;
  EXPECT_EQ(accepted, 20u);  // the queue bound
  EXPECT_EQ(exporter.stats().dropped, 500u - 20u);
  collector.release();
  ASSERT_TRUE(wait_until([&] { return exporter.stats().exported == 25; }));
  EXPECT_EQ(collector.spans(), 25u);
}

TEST(OtlpExporter, ShutdownCancelsACallInFlight) {
  OtlpCollector collector;
  collector.hold();
  auto o = plain(collector.address());
  o.timeout = 1h;
  auto exporter = std::make_unique<Exporter>(o);
  ASSERT_TRUE(exporter->offer(block(1, 0), Origin{}));
  ASSERT_TRUE(wait_until([&] { return collector.received().held == 1; }));
  exporter->shutdown(50ms);  // returns: the held call is cancelled after the grace
  const auto s = exporter->stats();
  EXPECT_EQ(s.exported + s.failed + s.dropped, 1u);
  EXPECT_EQ(s.exported, 0u);
}

TEST(OtlpExporter, ExportsEstimatedCallAndErrorMetrics) {
  OtlpCollector collector;
  auto o = plain(collector.address());
  o.metrics_interval = 20ms;
  Exporter exporter(o);
  auto b = block(4, 0);
  const uint64_t tenth = probability_to_threshold(0.1);
  for (auto& e : *b->mutable_events()) e.set_threshold(tenth);
  ASSERT_TRUE(exporter.offer(b, Origin{}));
  ASSERT_TRUE(wait_until([&] { return exporter.stats().metric_exports >= 1; }));
  const auto got = collector.received();
  ASSERT_FALSE(got.metrics.empty());
  const auto& rm = got.metrics.back().resource_metrics(0);
  EXPECT_EQ(rm.resource().attributes(0).value().string_value(), "api");
  const auto& m = rm.scope_metrics(0).metrics();
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(m[0].name(), "mcp.calls.estimated");
  EXPECT_NEAR(m[0].sum().data_points(0).as_double(), 40.0, 1e-6);
  EXPECT_EQ(m[1].name(), "mcp.errors.estimated");
  EXPECT_NEAR(m[1].sum().data_points(0).as_double(), 10.0, 1e-6);  // event 0 failed
}

TEST(OtlpExporter, RefusesBadHeadersAndMissingEndpoint) {
  EXPECT_THROW(parse_header("novalue"), mcp::Error);
  EXPECT_THROW(parse_header("=x"), mcp::Error);
  EXPECT_THROW(parse_header("bad key=x"), mcp::Error);
  EXPECT_THROW(parse_header("k=line\nbreak"), mcp::Error);
  EXPECT_THROW(parse_header("grpc-timeout=1"), mcp::Error);
  EXPECT_EQ(parse_header("X-Api-Key=a=b").second, "a=b");
  EXPECT_EQ(parse_header("X-Api-Key=a=b").first, "x-api-key");
  EXPECT_THROW(Exporter(ExporterOptions{}), mcp::Error);
  ExporterOptions missing_ca;
  missing_ca.endpoint = "127.0.0.1:1";
  missing_ca.ca_file = "/nonexistent/ca.pem";
  EXPECT_THROW(Exporter{missing_ca}, mcp::Error);
}

// TLS with a certificate made by the openssl CLI: trusted through ca_file it delivers; with the
// system's roots (which do not hold the test CA) nothing is exported.
TEST(OtlpExporter, TlsWithACaFile) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI missing";
  const auto dir = std::filesystem::temp_directory_path() /
                   ("otlp-tls-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "cd " + d + " && openssl req -x509 " + key + " -keyout ca.key -out ca.pem -days 1 -subj /CN=otlp-test-ca" +
      " && openssl req " + key + " -keyout key.pem -out server.csr -subj /CN=127.0.0.1" +
      " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext" +
      " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem" +
      " -days 1 -extfile san.ext >/dev/null 2>&1";
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
  auto read = [&](const char* name) {
    std::ifstream in(dir / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const OtlpCollector::Tls tls{read("cert.pem"), read("key.pem")};
  OtlpCollector collector(&tls);
  {
    ExporterOptions o = plain(collector.address());
    o.insecure = false;
    o.ca_file = d + "/ca.pem";
    Exporter exporter(o);
    ASSERT_TRUE(exporter.offer(block(2, 1), Origin{}));
    ASSERT_TRUE(wait_until([&] { return exporter.stats().exported == 3; })) << exporter.stats().failed;
  }
  {
    ExporterOptions o = plain(collector.address());
    o.insecure = false;
    o.timeout = 500ms;
    o.max_attempts = 2;
    Exporter exporter(o);
    ASSERT_TRUE(exporter.offer(block(1, 0), Origin{}));
    ASSERT_TRUE(wait_until([&] { return exporter.stats().failed == 1; }));
  }
  EXPECT_EQ(collector.spans(), 2u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mcp::otlp
