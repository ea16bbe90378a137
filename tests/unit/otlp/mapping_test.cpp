// Events → OTLP: spans vs log records, the OTel threshold in tracestate (checked against the
// spec's arithmetic done here, not through the code under test), adjusted counts, resource
// and CUDA attributes, and hostile strings that must still make valid OTLP.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "../../support/trace_ids.h"
#include "common/event.h"
#include "otlp/mapping.h"
#include "otlp/sample_metrics.h"

namespace mcp::otlp {
namespace {

namespace common = opentelemetry::proto::common::v1;
using Attributes = google::protobuf::RepeatedPtrField<common::KeyValue>;

const common::AnyValue* find(const Attributes& attrs, const std::string& key) {
  for (const auto& kv : attrs)
    if (kv.key() == key) return &kv.value();
  return nullptr;
}

// The spec's rejection threshold for acceptance threshold A, in 14 hex digits, trailing zeros
// trimmed: T = 2^56 - (A >> 8); keep-all is "0".
std::string reference_th(uint64_t a) { return test::otel_th(a); }

// strings: 0 "", 1 service, 2 probe, 3 comm, 4 container, 5..: extra
mcp::v1::EventBlock base_block(const std::string& service = "checkout") {
  mcp::v1::EventBlock b;
  for (const char* s : {"", service.c_str(), "/usr/bin/app:handle", "app", "c0ffee"}) b.add_strings(s);
  b.add_strings("0f3c1b2a-5d6e-4f70-8a9b-0c1d2e3f4a5b");  // 5: pod uid
  b.add_pair_sets();
  return b;
}

mcp::v1::CompactEvent* add_event(mcp::v1::EventBlock& b, bool duration) {
  auto* e = b.add_events();
  e->set_kind(duration ? mcp::v1::EVENT_KIND_URETPROBE : mcp::v1::EVENT_KIND_UPROBE);
  e->set_ts_ns(1'700'000'000'000'000'000ull);
  e->set_service(1);
  e->set_probe(2);
  e->set_comm(3);
  e->set_container_id(4);
  e->set_pod_uid(5);
  e->set_pid(4242);
  e->set_tid(4243);
  e->set_threshold(UINT64_MAX);
  e->set_event_id(static_cast<uint64_t>(b.events_size()));
  if (duration) {
    e->set_has_duration(true);
    e->set_duration_ns(1500);
  }
  return e;
}

// A call tree of one thread: outer [0, 1500] holds a [100, 600] that holds a [200, 300]; a
// sibling [700, 900]; another thread's [150, 400] is nobody's child. Each nested span is the
// child of the innermost span around it and shares its trace id.
TEST(OtlpMapping, NestedCallsOfAThreadAreChildSpansOfOneTrace) {
  auto b = base_block();
  const uint64_t t0 = 1'700'000'000'000'000'000ull;
  auto call = [&](uint64_t at, uint64_t dur, uint32_t tid) {
    auto* e = add_event(b, true);
    e->set_ts_ns(t0 + at);
    e->set_duration_ns(dur);
    e->set_tid(tid);
  };
  call(200, 100, 1);  // leaves come first in the block: returns arrive innermost first
  call(100, 500, 1);
  call(700, 200, 1);
  call(150, 250, 2);
  call(0, 1500, 1);
  Requests out;
  append_block(b, Origin{"agent-1", "node-a"}, &out);
  ASSERT_EQ(out.spans, 5u);
  const auto& spans = out.traces.resource_spans(0).scope_spans(0).spans();
  std::map<uint64_t, const opentelemetry::proto::trace::v1::Span*> by_start;
  for (const auto& s : spans) by_start[s.start_time_unix_nano() - t0] = &s;
  ASSERT_EQ(by_start.size(), 5u);
  const auto &outer = *by_start[0], &mid = *by_start[100], &leaf = *by_start[200], &sibling = *by_start[700],
             &other = *by_start[150];
  EXPECT_EQ(outer.end_time_unix_nano() - t0, 1500u);
  EXPECT_TRUE(outer.parent_span_id().empty());
  EXPECT_EQ(mid.parent_span_id(), outer.span_id());
  EXPECT_EQ(leaf.parent_span_id(), mid.span_id());
  EXPECT_EQ(sibling.parent_span_id(), outer.span_id());
  for (const auto* s : {&mid, &leaf, &sibling}) EXPECT_EQ(s->trace_id(), outer.trace_id());
  EXPECT_TRUE(other.parent_span_id().empty()) << "another thread's call is not nested";
  EXPECT_NE(other.trace_id(), outer.trace_id());
}

TEST(OtlpMapping, EventsWithADurationAreSpansOthersLogRecords) {
  auto b = base_block();
  add_event(b, true);
  add_event(b, false);
  add_event(b, true)->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
  Requests out;
  append_block(b, Origin{"agent-1", "node-a"}, &out);
  EXPECT_EQ(out.spans, 2u);
  EXPECT_EQ(out.log_records, 1u);
  ASSERT_EQ(out.traces.resource_spans_size(), 1);  // one resource: same service, pid, comm
  const auto& spans = out.traces.resource_spans(0).scope_spans(0);
  EXPECT_EQ(spans.scope().name(), "mcp-sampling");
  ASSERT_EQ(spans.spans_size(), 2);
  const auto& span = spans.spans(0);
  EXPECT_EQ(span.name(), "/usr/bin/app:handle");
  // ts is the call's entry: the span starts there and lasts its duration.
  EXPECT_EQ(span.start_time_unix_nano(), 1'700'000'000'000'000'000ull);
  EXPECT_EQ(span.end_time_unix_nano(), 1'700'000'000'000'001'500ull);
  EXPECT_TRUE(span.parent_span_id().empty());
  EXPECT_EQ(span.trace_id().size(), 16u);
  EXPECT_EQ(span.span_id().size(), 8u);
  EXPECT_NE(span.trace_id(), std::string(16, '\0'));
  EXPECT_TRUE(span.trace_state().empty());  // a random draw has no th
  const auto& log = out.logs.resource_logs(0).scope_logs(0).log_records(0);
  EXPECT_EQ(log.body().string_value(), "/usr/bin/app:handle");
  EXPECT_EQ(log.time_unix_nano(), 1'700'000'000'000'000'000ull);
  EXPECT_EQ(log.severity_number(), opentelemetry::proto::logs::v1::SEVERITY_NUMBER_INFO);
}

TEST(OtlpMapping, ResourceFollowsSemanticConventions) {
  auto b = base_block();
  for (const char* n : {"checkout-7d9f", "shop", "server"}) b.add_strings(n);  // 6, 7, 8
  auto* named = add_event(b, true);
  named->set_pod_name(6);
  named->set_pod_namespace(7);
  named->set_container_name(8);
  Requests out;
  append_block(b, Origin{"agent-1", "node-a"}, &out);
  const auto& attrs = out.traces.resource_spans(0).resource().attributes();
  ASSERT_NE(find(attrs, "service.name"), nullptr);
  EXPECT_EQ(find(attrs, "service.name")->string_value(), "checkout");
  EXPECT_EQ(find(attrs, "host.name")->string_value(), "node-a");
  EXPECT_EQ(find(attrs, "process.pid")->int_value(), 4242);
  EXPECT_EQ(find(attrs, "process.executable.name")->string_value(), "app");
  EXPECT_EQ(find(attrs, "container.id")->string_value(), "c0ffee");
  EXPECT_EQ(find(attrs, "k8s.pod.uid")->string_value(), "0f3c1b2a-5d6e-4f70-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(find(attrs, "k8s.pod.name")->string_value(), "checkout-7d9f");
  EXPECT_EQ(find(attrs, "k8s.namespace.name")->string_value(), "shop");
  EXPECT_EQ(find(attrs, "k8s.container.name")->string_value(), "server");
  EXPECT_EQ(find(attrs, "mcp.agent.id")->string_value(), "agent-1");

  auto unnamed = base_block("");
  auto* outside = add_event(unnamed, false);
  outside->set_container_id(0);
  outside->set_pod_uid(0);
  Requests out2;
  append_block(unnamed, Origin{}, &out2);
  const auto& a2 = out2.logs.resource_logs(0).resource().attributes();
  EXPECT_EQ(find(a2, "service.name")->string_value(), "unknown_service:app");
  EXPECT_EQ(find(a2, "container.id"), nullptr);
  EXPECT_EQ(find(a2, "k8s.pod.uid"), nullptr);
  EXPECT_EQ(find(a2, "k8s.pod.name"), nullptr);
  EXPECT_EQ(find(a2, "host.name"), nullptr);
}

TEST(OtlpMapping, ProcessesGetTheirOwnResources) {
  auto b = base_block();
  add_event(b, true);
  add_event(b, true)->set_pid(7);
  add_event(b, true);
  Requests out;
  append_block(b, Origin{}, &out);
  ASSERT_EQ(out.traces.resource_spans_size(), 2);
  EXPECT_EQ(out.traces.resource_spans(0).scope_spans(0).spans_size(), 2);
  EXPECT_EQ(out.traces.resource_spans(1).scope_spans(0).spans_size(), 1);
}

// p = 0.01 decided on the trace id: the span carries that id and ot=th with OTel's exact T.
TEST(OtlpMapping, TraceIdDecisionCarriesTraceIdAndExactThreshold) {
  const uint64_t a = probability_to_threshold(0.01);
  // Independent arithmetic: T = 2^56 - (A >> 8); p = 0.01 is fd70a3d70a3d71 (the spec rounds
  // it to fd70a4 at 4 digits).
  EXPECT_EQ(reference_th(a), "fd70a3d70a3d71");
  auto b = base_block();
  b.add_strings(otel_th(a));  // 6: what the agent puts in CompactEvent.th
  const uint64_t trace_id = 0x0123456789abcdefull;
  auto* e = add_event(b, true);
  e->set_threshold(a);
  e->set_trace_id_high(0x4bf92f3577b34da6ull);
  e->set_trace_id(trace_id);
  e->set_th(6);
  auto* keep_all = add_event(b, true);
  keep_all->set_trace_id(42);
  keep_all->set_th(6);  // the string is not trusted: th follows from the threshold
  Requests out;
  append_block(b, Origin{}, &out);
  const auto& spans = out.traces.resource_spans(0).scope_spans(0);
  const auto& span = spans.spans(0);
  EXPECT_EQ(span.trace_state(), "ot=th:fd70a3d70a3d71");
  // The application's whole W3C id: trace_id_high, then trace_id, big-endian.
  const std::string expected_id("\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\x01\x23\x45\x67\x89\xab\xcd\xef", 16);
  EXPECT_EQ(span.trace_id(), expected_id);
  // OTel's randomness R = the last 7 bytes: the same bits the kernel decided on.
  uint64_t r = 0;
  for (int i = 9; i < 16; ++i) r = r << 8 | static_cast<uint8_t>(span.trace_id()[i]);
  EXPECT_EQ(r, trace_id & ((uint64_t{1} << 56) - 1));
  EXPECT_DOUBLE_EQ(find(span.attributes(), "sampling.adjusted_count")->double_value(),
                   std::ldexp(1.0, 64) / static_cast<double>(a));
  EXPECT_EQ(spans.spans(1).trace_state(), "ot=th:0");
  EXPECT_EQ(spans.spans(1).trace_id(), std::string(15, '\0') + std::string(1, '\x2a'));  // an N:u64 id
  EXPECT_EQ(find(spans.spans(1).attributes(), "sampling.adjusted_count")->double_value(), 1.0);
}

// A trace id whose low half is zero is still a trace id (only all 16 bytes zero is "none").
TEST(OtlpMapping, TraceIdWithAZeroLowHalfIsStillCarried) {
  auto b = base_block();
  b.add_strings("0");
  auto* e = add_event(b, true);
  e->set_trace_id_high(0x0102030405060708ull);
  e->set_th(6);
  auto* log = add_event(b, false);
  log->set_trace_id_high(0x0102030405060708ull);
  log->set_th(6);
  Requests out;
  append_block(b, Origin{}, &out);
  const auto& span = out.traces.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_EQ(span.trace_id(), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8) + std::string(8, '\0'));
  EXPECT_EQ(span.trace_state(), "ot=th:0");
  const auto& record = out.logs.resource_logs(0).scope_logs(0).log_records(0);
  EXPECT_EQ(record.trace_id(), span.trace_id());
}

TEST(OtlpMapping, ConsistentDecisionWithoutTheTraceIdHasNoThreshold) {
  auto b = base_block();
  b.add_strings("0");
  add_event(b, true)->set_th(6);  // trace_id unknown
  Requests out;
  append_block(b, Origin{}, &out);
  EXPECT_TRUE(out.traces.resource_spans(0).scope_spans(0).spans(0).trace_state().empty());
}

// Consistent sampling of 200000 calls at p = 0.01 with random trace ids, decided here by the
// spec's rule (keep iff R >= T): the exported adjusted counts sum to the true count within
// four standard deviations of the estimator (sd = sqrt(N (1 - p) / p)).
TEST(OtlpMapping, AdjustedCountsSumToTheTrueCount) {
  constexpr uint64_t kCalls = 200000;
  constexpr double kP = 0.01;
  const uint64_t a = probability_to_threshold(kP);
  const uint64_t t = (uint64_t{1} << 56) - (a >> 8);
  std::mt19937_64 rng(7);
  auto b = base_block();
  b.add_strings(otel_th(a));
  uint64_t kept = 0;
  for (uint64_t i = 0; i < kCalls; ++i) {
    const uint64_t id = rng();
    if ((id & ((uint64_t{1} << 56) - 1)) < t) continue;
    auto* e = add_event(b, true);
    e->set_threshold(a);
    e->set_trace_id(id);
    e->set_th(6);
    ++kept;
  }
  ASSERT_GT(kept, 0u);
  Requests out;
  append_block(b, Origin{}, &out);
  double sum = 0;
  for (const auto& s : out.traces.resource_spans(0).scope_spans(0).spans())
    sum += find(s.attributes(), "sampling.adjusted_count")->double_value();
  const double sd = std::sqrt(kCalls * (1 - kP) / kP);
  EXPECT_NEAR(sum, static_cast<double>(kCalls), 4 * sd) << kept << " kept";

  // Keep-all: exact.
  auto all = base_block();
  for (int i = 0; i < 1000; ++i) add_event(all, i % 2 == 0);
  Requests out_all;
  append_block(all, Origin{}, &out_all);
  double sum_all = 0;
  for (const auto& s : out_all.traces.resource_spans(0).scope_spans(0).spans())
    sum_all += find(s.attributes(), "sampling.adjusted_count")->double_value();
  for (const auto& l : out_all.logs.resource_logs(0).scope_logs(0).log_records())
    sum_all += find(l.attributes(), "sampling.adjusted_count")->double_value();
  EXPECT_EQ(sum_all, 1000.0);
}

TEST(OtlpMapping, CudaLaunchCarriesKernelGridBlockStream) {
  auto b = base_block();
  b.add_strings("cudaLaunchKernel");  // 6
  b.add_strings("vec_add(float*, float*, int)");  // 7
  auto* e = add_event(b, true);
  e->set_kind(mcp::v1::EVENT_KIND_CUDA);
  auto* c = e->mutable_cuda();
  c->set_api(6);
  c->set_kernel(7);
  for (uint32_t v : {64u, 2u, 1u}) c->add_grid(v);
  for (uint32_t v : {256u, 1u, 1u}) c->add_block(v);
  c->set_stream(0x7f00dead0000ull);
  c->set_shared_mem(1024);
  e->set_has_ret(true);
  e->set_ret(2);  // cudaErrorMemoryAllocation
  Requests out;
  append_block(b, Origin{}, &out);
  const auto& span = out.traces.resource_spans(0).scope_spans(0).spans(0);
  const auto& attrs = span.attributes();
  EXPECT_EQ(find(attrs, "cuda.api")->string_value(), "cudaLaunchKernel");
  EXPECT_EQ(find(attrs, "cuda.kernel.name")->string_value(), "vec_add(float*, float*, int)");
  const auto& grid = find(attrs, "cuda.grid")->array_value();
  ASSERT_EQ(grid.values_size(), 3);
  EXPECT_EQ(grid.values(0).int_value(), 64);
  EXPECT_EQ(grid.values(1).int_value(), 2);
  EXPECT_EQ(find(attrs, "cuda.block")->array_value().values(0).int_value(), 256);
  EXPECT_EQ(find(attrs, "cuda.stream")->int_value(), 0x7f00dead0000ll);
  EXPECT_EQ(find(attrs, "cuda.shared_memory")->int_value(), 1024);
  EXPECT_EQ(find(attrs, "mcp.return_value")->int_value(), 2);
  EXPECT_EQ(span.status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
}

TEST(OtlpMapping, ErrorsSetStatusAndSeverity) {
  auto b = base_block();
  auto* failed = add_event(b, true);
  failed->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
  failed->set_has_ret(true);
  failed->set_ret(-2);
  auto* point = add_event(b, false);
  point->set_has_ret(true);
  point->set_ret(-1);
  auto* fine = add_event(b, true);
  fine->set_has_ret(true);
  fine->set_ret(3);
  Requests out;
  append_block(b, Origin{}, &out);
  const auto& spans = out.traces.resource_spans(0).scope_spans(0);
  EXPECT_EQ(spans.spans(0).status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(spans.spans(1).status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_UNSET);
  EXPECT_EQ(out.logs.resource_logs(0).scope_logs(0).log_records(0).severity_number(),
            opentelemetry::proto::logs::v1::SEVERITY_NUMBER_ERROR);
}

// Strings chosen by a traced process (comm, probe, tags, kernel names) may be any bytes; the
// requests must still parse as OTLP on the other side (proto3 strings are UTF-8).
TEST(OtlpMapping, HostileStringsStillMakeValidOtlp) {
  mcp::v1::EventBlock b;
  const std::string bad = std::string("ev\xff\xfeil\xc0\xaf") + '\0' + "x";
  for (int i = 0; i < 6; ++i) b.add_strings(i == 0 ? "" : bad + std::to_string(i));
  b.add_pair_sets();
  auto* tags = b.add_pair_sets();
  tags->add_keys(4);
  tags->add_values(5);
  for (bool duration : {true, false}) {
    auto* e = b.add_events();
    e->set_kind(mcp::v1::EVENT_KIND_CUDA);
    e->set_service(1);
    e->set_probe(2);
    e->set_comm(3);
    e->set_container_id(4);
    e->set_tags(1);
    e->set_threshold(UINT64_MAX);
    e->mutable_cuda()->set_kernel(5);
    e->mutable_cuda()->set_api(99);  // out of range: read as ""
    e->set_has_duration(duration);
  }
  Requests out;
  append_block(b, Origin{bad, bad}, &out);
  std::string wire;
  ASSERT_TRUE(out.traces.SerializeToString(&wire));
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest traces;
  ASSERT_TRUE(traces.ParseFromString(wire));
  ASSERT_TRUE(out.logs.SerializeToString(&wire));
  opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest logs;
  ASSERT_TRUE(logs.ParseFromString(wire));
  const auto& span = traces.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_NE(span.name().find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD replaced the bytes
  EXPECT_EQ(find(span.attributes(), "cuda.api")->string_value(), "");
  EXPECT_NE(find(span.attributes(), "mcp.tag.ev\xef\xbf\xbd\xef\xbf\xbdil\xef\xbf\xbd\xef\xbf\xbd" +
                                        std::string(1, '\0') + "x4"),
            nullptr);
}

TEST(SampleMetrics, SumsAdjustedCallsAndErrorsPerServiceAndProbe) {
  SampleMetrics m(1000);
  auto b = base_block();
  const uint64_t quarter = probability_to_threshold(0.25);
  for (int i = 0; i < 8; ++i) {
    auto* e = add_event(b, true);
    e->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
    e->set_threshold(quarter);
    e->set_has_ret(true);
    e->set_ret(i < 2 ? -11 : 0);
  }
  m.add_block(b);
  m.add_block(b);
  const auto totals = m.snapshot();
  ASSERT_EQ(totals.size(), 1u);
  const auto& t = totals.at({"checkout", "/usr/bin/app:handle"});
  EXPECT_DOUBLE_EQ(t.calls, 64.0);
  EXPECT_DOUBLE_EQ(t.errors, 16.0);
  EXPECT_EQ(t.events, 16u);

  opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest req;
  ASSERT_TRUE(m.append_to(&req, 2000));
  ASSERT_EQ(req.resource_metrics_size(), 1);
  EXPECT_EQ(find(req.resource_metrics(0).resource().attributes(), "service.name")->string_value(), "checkout");
  const auto& metrics = req.resource_metrics(0).scope_metrics(0).metrics();
  ASSERT_EQ(metrics.size(), 3);
  EXPECT_EQ(metrics[0].name(), "mcp.calls.estimated");
  EXPECT_TRUE(metrics[0].sum().is_monotonic());
  EXPECT_EQ(metrics[0].sum().aggregation_temporality(),
            opentelemetry::proto::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
  const auto& point = metrics[0].sum().data_points(0);
  EXPECT_DOUBLE_EQ(point.as_double(), 64.0);
  EXPECT_EQ(point.start_time_unix_nano(), 1000u);
  EXPECT_EQ(point.time_unix_nano(), 2000u);
  EXPECT_EQ(find(point.attributes(), "mcp.probe")->string_value(), "/usr/bin/app:handle");
  EXPECT_EQ(metrics[1].name(), "mcp.errors.estimated");
  EXPECT_DOUBLE_EQ(metrics[1].sum().data_points(0).as_double(), 16.0);
  EXPECT_EQ(metrics[2].sum().data_points(0).as_int(), 16);
}

}  // namespace
}  // namespace mcp::otlp
