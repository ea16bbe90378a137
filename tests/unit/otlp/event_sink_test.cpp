// The agent's OTLP sink against a real OTLP receiver on 127.0.0.1:0: events consumed become
// spans / log records through the same compact encoding the broker gets, a lone event is sent
// by the timer without a flush, and a comm with invalid UTF-8 still makes valid OTLP.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "otlp/event_sink.h"
#include "otlp_collector.h"
#include "wait_until.h"

namespace mcp::otlp {
namespace {

using namespace std::chrono_literals;

using test::wait_until;

Event make(uint32_t i, bool timed) {
  static const std::string probe = "/srv/app:handle";
  Event e;
  e.ts_ns = 1'700'000'000'000'000'000ull + i;
  e.kind = timed ? EventKind::kUretprobe : EventKind::kUprobe;
  e.probe = probe;
  e.pid = 99;
  e.tid = 100;
  std::memcpy(e.comm.data(), "app", 3);
  e.service = "edge";
  e.has_duration = timed;
  e.duration_ns = timed ? 700 : 0;
  e.threshold = probability_to_threshold(0.5);
  return e;
}

ExporterOptions options(const test::OtlpCollector& c) {
  ExporterOptions o;
  o.endpoint = c.address();
  o.insecure = true;
  o.batch_interval = 20ms;
  o.metrics_interval = 0ms;
  return o;
}

TEST(OtlpSink, ConsumedEventsArriveAsSpansAndLogsOnFlush) {
  test::OtlpCollector collector;
  OtlpSink sink(options(collector), Origin{"agent-s", "node-s"}, 16);
  for (uint32_t i = 0; i < 100; ++i) sink.consume(make(i, i % 4 != 0));
  sink.flush();
  EXPECT_EQ(sink.stats().exported, 100u);
  EXPECT_EQ(collector.spans(), 75u);
  EXPECT_EQ(collector.log_records(), 25u);
  const auto got = collector.received();
  const auto& rs = got.traces.front().resource_spans(0);
  bool host = false;
  for (const auto& a : rs.resource().attributes()) host |= a.key() == "host.name" && a.value().string_value() == "node-s";
  EXPECT_TRUE(host);
  const auto& span = rs.scope_spans(0).spans(0);
  for (const auto& a : span.attributes())
    if (a.key() == "sampling.adjusted_count") EXPECT_DOUBLE_EQ(a.value().double_value(), 2.0);
  EXPECT_EQ(span.end_time_unix_nano() - span.start_time_unix_nano(), 700u);
}

TEST(OtlpSink, ALoneEventIsSentWithoutWaitingForAFullBlock) {
  test::OtlpCollector collector;
  OtlpSink sink(options(collector), Origin{}, 1000);
  sink.consume(make(1, true));
  EXPECT_TRUE(wait_until([&] { return collector.spans() == 1; }));
  sink.flush();
}

TEST(OtlpSink, InvalidUtf8CommStillMakesValidOtlp) {
  test::OtlpCollector collector;
  OtlpSink sink(options(collector), Origin{}, 4);
  Event e = make(1, false);
  std::memcpy(e.comm.data(), "b\xff\xfe\xc0", 4);
  sink.consume(e);
  sink.flush();
  ASSERT_EQ(collector.log_records(), 1u);  // the receiver parsed it: the strings are UTF-8
  const auto got = collector.received();
  std::string exe;
  for (const auto& a : got.logs[0].resource_logs(0).resource().attributes())
    if (a.key() == "process.executable.name") exe = a.value().string_value();
  EXPECT_EQ(exe, "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

// The runtime's shutdown wait: true once the collector accepted every event; the report then
// names the counts and nothing undelivered.
TEST(OtlpSink, DrainWaitsForTheCollectorAndReportsWhatItAccepted) {
  test::OtlpCollector collector;
  OtlpSink sink(options(collector), Origin{}, 1000);
  for (uint32_t i = 0; i < 10; ++i) sink.consume(make(i, true));
  EXPECT_TRUE(sink.drain(10s, [] { return false; }));
  EXPECT_EQ(collector.spans(), 10u);
  const auto r = sink.report();
  EXPECT_EQ(r.summary, "otlp: collector " + collector.address() + ", exported 10, failed 0, dropped 0, retries 0");
  EXPECT_EQ(r.undelivered, "");
  EXPECT_EQ(r.lost, 0u);
}

// A collector that refuses (non-retryable): the events are lost, and the report says so, which
// makes the run exit 1.
TEST(OtlpSink, RefusedEventsAreReportedLost) {
  test::OtlpCollector collector;
  collector.fail_next(100, grpc::StatusCode::INVALID_ARGUMENT);
  OtlpSink sink(options(collector), Origin{}, 1000);
  for (uint32_t i = 0; i < 7; ++i) sink.consume(make(i, false));
  EXPECT_FALSE(sink.drain(10s, [] { return false; }));
  const auto r = sink.report();
  EXPECT_EQ(r.lost, 7u);
  EXPECT_EQ(r.undelivered, "7 events undelivered to the OTLP collector " + collector.address() +
                               ": 7 refused or out of attempts, 0 dropped (full queue, or not sent before shutdown)");
}

// A collector that never answers: the wait ends at its limit (the call in flight is cancelled)
// and at give_up() (a second Ctrl-C) at once; what was not accepted is dropped, counted.
TEST(OtlpSink, DrainEndsAtItsLimitOrWhenGivenUpWhileTheCollectorHangs) {
  for (const bool give_up : {false, true}) {
    test::OtlpCollector collector;
    collector.hold();
    OtlpSink sink(options(collector), Origin{}, 1000);
    for (uint32_t i = 0; i < 5; ++i) sink.consume(make(i, true));
    EXPECT_FALSE(sink.drain(give_up ? 1h : 100ms, [&] { return give_up; }));
    const auto r = sink.report();
    EXPECT_EQ(r.lost, 5u);
    EXPECT_EQ(sink.stats().exported, 0u);
    collector.release();
  }
}

}  // namespace
}  // namespace mcp::otlp
