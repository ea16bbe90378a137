// Event -> EventBlock -> Event (the compact "events-v2" wire format): every printed field
// survives, strings are sent once per block, and a hostile block is refused with a reason
// instead of being read out of range.
#include "forward/event_block.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/utf8.h"
#include "../../support/events.h"
#include "output/formatter.h"

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

// A block from an untrusted peer: each defect is refused with a reason, never read.
TEST(EventBlock, HostileBlocksAreRejectedCleanly) {
  mcp::v1::EventBlock good;
  ASSERT_TRUE(good.ParseFromString(encode({sample_event(1)})));
  struct Case {
    const char* name;
    std::function<void(mcp::v1::EventBlock&)> spoil;
  };
  const std::vector<Case> cases = {
      {"probe index", [](auto& b) { b.mutable_events(0)->set_probe(1000); }},
      {"comm index", [](auto& b) { b.mutable_events(0)->set_comm(UINT32_MAX); }},
      {"service index", [&](auto& b) { b.mutable_events(0)->set_service(static_cast<uint32_t>(b.strings_size())); }},
      {"th index", [](auto& b) { b.mutable_events(0)->set_th(77); }},
      {"container index", [](auto& b) { b.mutable_events(0)->set_container_id(77); }},
      {"pod uid index", [](auto& b) { b.mutable_events(0)->set_pod_uid(77); }},
      {"pod name index", [](auto& b) { b.mutable_events(0)->set_pod_name(77); }},
      {"pod namespace index", [](auto& b) { b.mutable_events(0)->set_pod_namespace(77); }},
      {"container name index", [](auto& b) { b.mutable_events(0)->set_container_name(77); }},
      {"pod labels set", [](auto& b) { b.mutable_events(0)->set_pod_labels(9); }},
      {"tags set", [](auto& b) { b.mutable_events(0)->set_tags(9); }},
      {"attributes set", [](auto& b) { b.mutable_events(0)->set_attributes(9); }},
      {"pair key", [](auto& b) { b.mutable_pair_sets(1)->set_keys(0, 500); }},
      {"pair value", [](auto& b) { b.mutable_pair_sets(1)->set_values(0, 500); }},
      {"pair lengths", [](auto& b) { b.mutable_pair_sets(1)->add_keys(0); }},
      {"kind", [](auto& b) { b.mutable_events(0)->set_kind(static_cast<mcp::v1::EventKind>(17)); }},
      {"kind unset", [](auto& b) { b.mutable_events(0)->set_kind(mcp::v1::EVENT_KIND_UNSPECIFIED); }},
      {"args", [](auto& b) { for (int i = 0; i < 7; ++i) b.mutable_events(0)->add_args(1); }},
      {"cuda api", [](auto& b) { b.mutable_events(0)->mutable_cuda()->set_api(400); }},
      {"cuda grid", [](auto& b) { for (int i = 0; i < 4; ++i) b.mutable_events(0)->mutable_cuda()->add_grid(1); }},
      {"strings[0]", [](auto& b) { b.set_strings(0, "x"); }},
      {"no strings, index 1", [](auto& b) { b.clear_strings(); }},
      {"pair_sets[0]", [](auto& b) { b.mutable_pair_sets(0)->add_keys(0); b.mutable_pair_sets(0)->add_values(0); }},
  };
  EventBlockDecoder dec;
  for (const auto& c : cases) {
    mcp::v1::EventBlock bad = good;
    c.spoil(bad);
    std::string error;
    EXPECT_FALSE(dec.parse(bad.SerializeAsString(), error)) << c.name;
    EXPECT_FALSE(error.empty()) << c.name;
    EXPECT_EQ(dec.size(), 0u) << c.name;
  }
  std::string error;
  EXPECT_FALSE(dec.parse("\xff\xff\xff", error));
  // Empty dictionaries are allowed: index 0 still means unset.
  mcp::v1::EventBlock bare;
  bare.add_events()->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
  EXPECT_TRUE(dec.parse(bare.SerializeAsString(), error)) << error;
  Event e;
  uint64_t id = 0;
  dec.get(0, e, id);
  EXPECT_EQ(e.probe, "");
  EXPECT_TRUE(e.tags.empty());
  EXPECT_TRUE(dec.parse(good.SerializeAsString(), error)) << error;
}

TEST(EventBlock, V1SamplesDecodeToTheSameJson) {
  // An old broker sends Samples: they go through the same encoder.
  const Event e = sample_event(3);
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(encode({e}), error));
  mcp::v1::Sample s;
  to_sample(e, &s);
  Event back;
  from_sample(s, back);
  EXPECT_EQ(to_json(back), to_json(e));
}


// The v1 wire (Sample) carries the pod's names and labels, and the subscriber gets them back.
TEST(EventBlock, V1SamplePodNamesAndLabelsRoundTrip) {
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
