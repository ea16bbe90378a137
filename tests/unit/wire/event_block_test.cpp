// The codec (lib/wire/event_block.h): Event -> EventBlock -> Event (the compact "events-v2"
// wire format): every printed field survives, strings are sent once per block, and a hostile
// block is refused with the validator's reason instead of being read out of range.
#include "wire/event_block.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/utf8.h"
#include "../../support/events.h"
#include "output/formatter.h"
#include "wire/samples.h"

namespace mcp {
namespace {

Event sample_event(uint32_t pid) {
  static const std::string probe = "/usr/bin/app:handle";
  Event e;
  e.ts_ns = 1700000000000000000ull + pid;
  e.ktime_ns = 42;
  e.hlc = 7;
  e.kind = EventKind::kUretprobe;
  e.probe_id = 3;
  e.probe = probe;
  e.pid = pid;
  e.tid = pid + 1;
  e.cpu = 1;
  e.cgroup_id = 99;
  const std::string comm = "worker";
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  e.nargs = 2;
  e.args = {1, 2};
  e.has_ret = true;
  e.ret = -11;
  e.has_duration = true;
  e.duration_ns = 1234;
  e.threshold = UINT64_MAX / 4;
  e.consistent = true;
  e.trace_id_hi = 0x4bf92f3577b34da6ull + pid;
  e.trace_id_lo = 0xa3ce929d0e0e4736ull;
  e.service = "checkout";
  e.container_id = "abc123";
  e.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  e.pod = "checkout-7d9f";
  e.pod_namespace = "shop";
  e.container = "server";
  e.pod_labels = {{"tier", "front"}};
  e.tags = {{"zone", "a"}, {"env", "prod"}};  // unsorted: the wire sorts them
  e.attributes = {{"k", "v"}};
  return e;
}

using test::to_json;

std::string encode(const std::vector<Event>& events) {
  EventBlockEncoder enc;
  for (const auto& e : events) enc.add(e);
  std::string out;
  enc.finish(out);
  return out;
}

TEST(EventBlock, RoundTripPrintsTheSameJson) {
  Event cuda = sample_event(5);
  cuda.kind = EventKind::kCuda;
  cuda.cuda.api = "cudaLaunchKernel";
  cuda.cuda.kernel = "void k<int>(int*)";
  cuda.cuda.grid = {1, 2, 3};
  cuda.cuda.block = {4, 5, 6};
  cuda.cuda.shared_mem = 128;
  cuda.cuda.stream = 9;
  cuda.cuda.slow_mode = true;
  cuda.cuda.user_stack = {0x1000, 0x2000};
  Event graph = sample_event(6);
  graph.kind = EventKind::kCuda;
  graph.cuda.api = "cudaGraphLaunch";
  graph.cuda.graph = 0x9000;
  graph.cuda.graph_kernel_nodes = 0;  // known to be none: kept apart from "not known"
  Event captured = graph;
  captured.cuda.graph_kernel_nodes.reset();
  Event plain;  // every default, probe empty
  const std::vector<Event> events = {sample_event(1), cuda, graph, captured, plain};

  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(encode(events), error)) << error;
  ASSERT_EQ(dec.size(), events.size());
  Event back;  // reused across events, as the subscriber does
  uint64_t event_id = 1;
  for (size_t i = 0; i < events.size(); ++i) {
    dec.get(i, back, event_id);
    EXPECT_EQ(to_json(back), to_json(events[i])) << "event " << i;
    EXPECT_EQ(event_id, 0u);
  }
}

// The W3C id crosses as two fixed64 halves: trace_id (bytes 8..15, what downsampling and old
// brokers read) and trace_id_high (bytes 0..7).
TEST(EventBlock, TraceIdTravelsAsItsTwoHalves) {
  Event plain = sample_event(2);
  plain.consistent = false;
  plain.trace_id_hi = plain.trace_id_lo = 0;
  mcp::v1::EventBlock block;
  ASSERT_TRUE(block.ParseFromString(encode({sample_event(1), plain})));
  EXPECT_EQ(block.events(0).trace_id_high(), 0x4bf92f3577b34da7ull);
  EXPECT_EQ(block.events(0).trace_id(), 0xa3ce929d0e0e4736ull);
  EXPECT_EQ(block.events(1).trace_id_high(), 0u);
  EXPECT_EQ(block.events(1).trace_id(), 0u);
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(block.SerializeAsString(), error)) << error;
  Event back;
  uint64_t id = 0;
  dec.get(0, back, id);
  EXPECT_EQ(back.trace_id_hi, 0x4bf92f3577b34da7ull);
  EXPECT_EQ(back.trace_id_lo, 0xa3ce929d0e0e4736ull);
  dec.get(1, back, id);
  EXPECT_FALSE(back.has_trace_id());
}

TEST(EventBlock, RepeatedStringsAreSentOncePerBlock) {
  std::vector<Event> events;
  for (uint32_t i = 0; i < 100; ++i) events.push_back(sample_event(i));
  mcp::v1::EventBlock block;
  ASSERT_TRUE(block.ParseFromString(encode(events)));
  // "", probe, comm, container, pod uid, pod, namespace, container name, tier, front, service,
  // zone, a, env, prod, k, v, th
  EXPECT_EQ(block.strings_size(), 18);
  EXPECT_EQ(block.strings(static_cast<int>(block.events(99).pod_uid())), "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");
  EXPECT_EQ(block.strings(static_cast<int>(block.events(99).pod_name())), "checkout-7d9f");
  EXPECT_EQ(block.strings(static_cast<int>(block.events(99).pod_namespace())), "shop");
  EXPECT_EQ(block.strings(static_cast<int>(block.events(99).container_name())), "server");
  EXPECT_EQ(block.pair_sets_size(), 4);  // none, pod labels, tags, attributes
  const auto& tags = block.pair_sets(static_cast<int>(block.events(0).tags()));
  ASSERT_EQ(tags.keys_size(), 2);
  EXPECT_EQ(block.strings(static_cast<int>(tags.keys(0))), "env");
  EXPECT_EQ(block.strings(static_cast<int>(tags.keys(1))), "zone");
}

TEST(EventBlock, EveryBlockStandsAlone) {
  EventBlockEncoder enc;
  enc.add(sample_event(1));
  std::string first, second;
  enc.finish(first);
  enc.add(sample_event(2));
  enc.finish(second);
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(second, error)) << error;
  Event back;
  uint64_t id = 0;
  dec.get(0, back, id);
  EXPECT_EQ(to_json(back), to_json(sample_event(2)));
}

TEST(EventBlock, InvalidUtf8IsRepairedAndTheBlockStillParses) {
  Event e;
  const std::string comm = "\xff\xfe";
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  const std::string probe = "/opt/\xe9t\xe9/app:fn";
  e.probe = probe;
  e.kind = EventKind::kCuda;
  e.cuda.kernel = "k\xc0\xaf";
  e.container_id = "c\x80";
  e.service = "svc";
  e.tags = {{"t\xff", "v\xfe"}};
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(encode({e, Event{}}), error)) << error;
  Event back;
  uint64_t id = 0;
  dec.get(0, back, id);
  EXPECT_EQ(back.comm_view(), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(back.probe, "/opt/\xef\xbf\xbdt\xef\xbf\xbd/app:fn");
  EXPECT_EQ(back.cuda.kernel, "k\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_TRUE(is_valid_utf8(back.container_id));
  ASSERT_EQ(back.tags.size(), 1u);
  EXPECT_EQ(back.tags[0].second, "v\xef\xbf\xbd");
  // The JSON encoder repairs the same way: trace and subscribe print the same bytes.
  EXPECT_EQ(to_json(back), to_json(e));
}

TEST(V1Sample, DecodesToTheSameJsonAsTheBlock) {
  // A v1 subscription gets Samples: they print as the compact block does.
  const Event e = sample_event(3);
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(encode({e}), error));
  Event from_block;
  uint64_t id = 0;
  dec.get(0, from_block, id);
  mcp::v1::Sample s;
  to_sample(e, &s);
  Event back;
  from_sample(s, back);
  EXPECT_EQ(to_json(back), to_json(e));
  EXPECT_EQ(to_json(back), to_json(from_block));
}


// The v1 wire (Sample) carries the pod's names and labels, and the subscriber gets them back.
TEST(V1Sample, PodNamesAndLabelsRoundTrip) {
  Event e;
  e.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  e.pod = "web-1";
  e.pod_namespace = "shop";
  e.container = "app";
  e.pod_labels = {{"app", "web"}, {"tier", "front"}};
  mcp::v1::Sample s;
  to_sample(e, &s);
  EXPECT_EQ(s.pod_name(), "web-1");
  EXPECT_EQ(s.pod_namespace(), "shop");
  EXPECT_EQ(s.container_name(), "app");
  EXPECT_EQ(s.pod_labels().at("tier"), "front");
  Event back;
  from_sample(s, back);
  EXPECT_EQ(back.pod, "web-1");
  EXPECT_EQ(back.pod_namespace, "shop");
  EXPECT_EQ(back.container, "app");
  auto labels = back.pod_labels;
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, e.pod_labels);
}

}  // namespace
}  // namespace mcp
