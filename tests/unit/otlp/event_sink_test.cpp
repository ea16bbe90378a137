// The agent's OTLP sink against a real OTLP receiver on 127.0.0.1:0: events consumed become
// spans / log records through the same compact encoding the broker gets, a lone event is sent
// by the timer without a flush, and a comm with invalid UTF-8 still makes valid OTLP.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "otlp/event_sink.h"
#include "otlp_collector.h"

namespace mcp::otlp {
namespace {

using namespace std::chrono_literals;

template <typename F>
bool wait_until(F cond, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

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

}  // namespace
}  // namespace mcp::otlp
