#include "broker/event_block.h"

#include <gtest/gtest.h>

#include "broker/packet_forms.h"
#include "common/event.h"
#include "../../support/compact_block.h"

namespace mcp::broker {
namespace {

using mcp::test::compact_block;

Verdict parse(const mcp::v1::EventBlock& block, mcp::v1::EventBlock* out, PublishLimits limits = {}) {
  return parse_event_block(block.SerializeAsString(), limits, out);
}

TEST(EventBlock, ConvertsToSamplesWithEveryStringResolved) {
  const auto block = compact_block(3, 100);
  mcp::v1::EventBlock parsed;
  ASSERT_TRUE(parse(block, &parsed).ok());
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(parsed, "agent-1", &samples);
  ASSERT_EQ(samples.size(), 3);
  const auto& s = samples[0];
  EXPECT_EQ(s.kind(), "syscall");
  EXPECT_EQ(s.probe(), "syscall:getppid");
  EXPECT_EQ(s.comm(), "app");
  EXPECT_EQ(s.service(), "checkout");
  EXPECT_EQ(s.tags().at("zone"), "b");
  EXPECT_EQ(s.attributes().at("k"), "v");
  EXPECT_EQ(s.cuda().api(), "cudaLaunchKernel");
  EXPECT_EQ(s.cuda().kernel(), "vec_add");
  EXPECT_EQ(s.ret(), -5);
  EXPECT_EQ(s.agent_id(), "agent-1");
  EXPECT_EQ(s.args(0), 100u);
  EXPECT_EQ(samples[1].service(), "api");
  EXPECT_EQ(samples[1].tags().at("zone"), "a");
  EXPECT_TRUE(samples[1].container_id().empty());
}

TEST(EventBlock, SamplesRoundTripThroughABlock) {
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(compact_block(7, 1), "a", &samples);
  mcp::v1::EventBlock block;
  samples_to_block(samples, &block);
  EXPECT_TRUE(check_event_block(block).ok());
  EXPECT_LT(block.strings_size(), 7 * 3) << "each distinct string is sent once";
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> again;
  block_to_samples(block, "a", &again);
  ASSERT_EQ(again.size(), samples.size());
  for (int i = 0; i < samples.size(); ++i)
    EXPECT_EQ(again[i].SerializeAsString(), samples[i].SerializeAsString()) << i;
}

// The full W3C trace id (both halves) and th survive the broker's Sample <-> block conversions,
// so v1 subscribers and the broker's OTLP export see the application's id.
TEST(EventBlock, TraceIdCrossesTheBrokerBothWays) {
  auto block = compact_block(2, 1);
  block.add_strings("fd70a3d70a3d71");
  auto* e = block.mutable_events(0);
  e->set_trace_id_high(0x4bf92f3577b34da6ull);
  e->set_trace_id(0xa3ce929d0e0e4736ull);
  e->set_th(static_cast<uint32_t>(block.strings_size() - 1));
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(block, "a", &samples);
  EXPECT_EQ(samples[0].trace_id_high(), 0x4bf92f3577b34da6ull);
  EXPECT_EQ(samples[0].trace_id(), 0xa3ce929d0e0e4736ull);
  EXPECT_EQ(samples[0].th(), "fd70a3d70a3d71");
  EXPECT_EQ(samples[1].trace_id_high(), 0u);
  mcp::v1::EventBlock back;
  samples_to_block(samples, &back);
  EXPECT_EQ(back.events(0).trace_id_high(), 0x4bf92f3577b34da6ull);
  EXPECT_EQ(back.events(0).trace_id(), 0xa3ce929d0e0e4736ull);
  EXPECT_EQ(back.strings(static_cast<int>(back.events(0).th())), "fd70a3d70a3d71");
  EXPECT_EQ(back.events(1).trace_id_high(), 0u);
}

TEST(EventBlock, PodIdentityCrossesTheBrokerBothWays) {
  auto block = compact_block(2);
  block.add_strings("0a1b");                                  // 12
  block.add_strings("5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");  // 13
  block.mutable_events(1)->set_container_id(12);
  block.mutable_events(1)->set_pod_uid(13);
  block.add_strings("web-1");  // 14
  block.add_strings("shop");   // 15
  block.add_strings("app");    // 16
  block.mutable_events(1)->set_pod_name(14);
  block.mutable_events(1)->set_pod_namespace(15);
  block.mutable_events(1)->set_container_name(16);
  auto* labels = block.add_pair_sets();
  labels->add_keys(16);
  labels->add_values(14);
  block.mutable_events(1)->set_pod_labels(static_cast<uint32_t>(block.pair_sets_size() - 1));
  mcp::v1::EventBlock parsed;
  ASSERT_TRUE(parse(block, &parsed).ok());
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(parsed, "a", &samples);
  EXPECT_EQ(samples[1].container_id(), "0a1b");
  EXPECT_EQ(samples[1].pod_uid(), "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");
  EXPECT_TRUE(samples[0].pod_uid().empty());
  mcp::v1::EventBlock again;
  samples_to_block(samples, &again);
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> back;
  block_to_samples(again, "a", &back);
  EXPECT_EQ(back[1].pod_uid(), "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");
  EXPECT_EQ(back[1].container_id(), "0a1b");
  EXPECT_EQ(back[1].pod_name(), "web-1");
  EXPECT_EQ(back[1].pod_namespace(), "shop");
  EXPECT_EQ(back[1].container_name(), "app");
  EXPECT_EQ(back[1].pod_labels().at("app"), "web-1");
  EXPECT_TRUE(back[0].pod_name().empty());
  block.mutable_events(0)->set_pod_uid(17);  // one past the dictionary
  EXPECT_EQ(parse(block, &parsed).code, Verdict::kInvalid);
}

TEST(EventBlock, HostileIndicesAndCountsAreRefused) {
  mcp::v1::EventBlock out;
  auto bad = compact_block(2);
  bad.mutable_events(1)->set_probe(12);  // one past the dictionary
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_events(1)->set_tags(4);
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_events(0)->mutable_cuda()->set_kernel(UINT32_MAX);
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_pair_sets(1)->add_keys(1);  // more keys than values
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_pair_sets(2)->set_values(0, 99);
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.set_strings(0, "x");
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_events(0)->set_threshold(0);
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  bad = compact_block(2);
  bad.mutable_events(0)->set_kind(static_cast<mcp::v1::EventKind>(77));
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  PublishLimits small;
  small.max_batch_samples = 5;
  EXPECT_EQ(parse(compact_block(6), &out, small).code, Verdict::kTooLarge);
  EXPECT_TRUE(parse(compact_block(5), &out, small).ok());
  const std::string garbage = "\x1a\xff\xff\xff\xff\x0f";  // events field longer than the bytes
  EXPECT_EQ(parse_event_block(garbage, {}, &out).code, Verdict::kInvalid);
}

TEST(EventBlock, EmptyDictionariesMeanUnsetAndStillCheck) {
  mcp::v1::EventBlock b;
  auto* e = b.add_events();
  e->set_kind(mcp::v1::EVENT_KIND_UPROBE);
  e->set_threshold(UINT64_MAX);
  mcp::v1::EventBlock out;
  ASSERT_TRUE(parse(b, &out).ok());
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(out, "a", &samples);
  EXPECT_EQ(samples[0].probe(), "");
  EXPECT_TRUE(samples[0].tags().empty());
}

// The broker adds event ids to the bytes it received instead of re-encoding the block: what it
// stores must parse as the block with those ids set, whatever the field order on the wire, an
// explicit event_id 0 included (the appended id wins), and an agent's own id kept.
TEST(EventBlock, EventIdsAreAddedToTheBytesAsReceived) {
  auto block = compact_block(4, 10);
  block.mutable_events(2)->set_event_id(777);  // the agent's own: kept
  // Events first, then the dictionaries, with an explicit `event_id: 0` on event 1.
  mcp::v1::EventBlock events_only;
  *events_only.mutable_events() = block.events();
  mcp::v1::EventBlock dicts_only = block;
  dicts_only.clear_events();
  std::string wire;
  for (int i = 0; i < events_only.events_size(); ++i) {
    std::string e = events_only.events(i).SerializeAsString();
    ASSERT_LT(e.size(), 120u);
    if (i == 1) e += std::string("\xc0\x01\x00", 3);  // field 24, varint 0
    wire += '\x1a';
    wire += static_cast<char>(e.size());  // events of this block are under 128 bytes
    wire += e;
  }
  wire += dicts_only.SerializeAsString();
  mcp::v1::EventBlock parsed;
  ASSERT_TRUE(parse_event_block(wire, {}, &parsed).ok());
  ASSERT_EQ(parsed.events(1).event_id(), 0u);

  const std::vector<uint64_t> ids = {1, 300, 0, uint64_t{1} << 63};
  std::string out;
  ASSERT_TRUE(with_event_ids(wire, ids, &out));
  mcp::v1::EventBlock expected = block;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != 0) expected.mutable_events(static_cast<int>(i))->set_event_id(ids[i]);
  mcp::v1::EventBlock got;
  ASSERT_TRUE(parse_event_block(out, {}, &got).ok());
  EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(got.events(2).event_id(), 777u);
  EXPECT_EQ(got.events(1).event_id(), 300u);

  // No ids to add: the very same bytes.
  ASSERT_TRUE(with_event_ids(wire, std::vector<uint64_t>(4, 0), &out));
  EXPECT_EQ(out, wire);
  // Not the events expected, or not a well-formed block: refused, the caller re-encodes.
  EXPECT_FALSE(with_event_ids(wire, std::vector<uint64_t>(3, 1), &out));
  EXPECT_FALSE(with_event_ids(wire, std::vector<uint64_t>(5, 1), &out));
  EXPECT_FALSE(with_event_ids(wire.substr(0, wire.size() - 1), ids, &out));
  EXPECT_FALSE(with_event_ids(std::string("\x1a\xff\xff\xff\xff\x0f", 6), {1}, &out));
}

TEST(EventBlock, FilterMatchesServiceAndTagsPerDictionaryEntryLikeTheV1Filter) {
  const auto block = compact_block(60);
  mcp::v1::SamplePacket v1;
  block_to_samples(block, "a", v1.mutable_samples());
  SubscriptionFilter f;
  f.service = "api";
  f.tags = {{"zone", "a"}};
  f.rate = 0.5;
  mcp::v1::EventBlock subset;
  ASSERT_EQ(filter_block(block, f, &subset), Filtered::kSome);
  mcp::v1::SamplePacket expected;
  ASSERT_TRUE(filter_packet(v1, f, &expected));
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> got;
  block_to_samples(subset, "a", &got);
  ASSERT_EQ(got.size(), expected.samples_size());
  for (int i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].SerializeAsString(), expected.samples(i).SerializeAsString()) << i;
  f.service = "nobody";
  EXPECT_EQ(filter_block(block, f, &subset), Filtered::kNone);
}

// A filter every event passes (one service's subscriber on that service's events) copies
// nothing: the subscriber is handed the stored packet itself, as an unfiltered one is.
TEST(PacketForms, AFilterEveryEventPassesSharesTheStoredPacket) {
  SubscriptionFilter api;
  api.service = "api";
  mcp::v1::EventBlock only_api;
  ASSERT_EQ(filter_block(compact_block(60), api, &only_api), Filtered::kSome);
  auto stored = std::make_shared<mcp::v1::SamplePacket>();
  stored->set_agent_id("a");
  only_api.SerializeToString(stored->mutable_events());
  PacketForms forms(stored);
  uint64_t n = 0;
  EXPECT_EQ(forms.for_subscriber(api, true, &n).get(), stored.get());
  EXPECT_EQ(n, 30u);
  mcp::v1::EventBlock untouched;
  EXPECT_EQ(filter_block(only_api, api, &untouched), Filtered::kAll);
  EXPECT_EQ(untouched.events_size(), 0);
  api.rate = 0.5;  // thresholds change: a subset, never the stored packet
  const PacketPtr halved = forms.for_subscriber(api, true, &n);
  ASSERT_NE(halved, nullptr);
  EXPECT_NE(halved.get(), stored.get());
  EXPECT_NE(halved->events(), stored->events()) << "kept thresholds are rescaled";
}

TEST(PacketForms, UnfilteredCompactSubscribersShareOneEncodedPacket) {
  auto stored = std::make_shared<mcp::v1::SamplePacket>();
  stored->set_agent_id("a");
  stored->set_sequence(3);
  compact_block(10).SerializeToString(stored->mutable_events());
  PacketForms forms(stored);
  const SubscriptionFilter all;
  uint64_t n = 0;
  const PacketPtr one = forms.for_subscriber(all, true, &n);
  const PacketPtr two = forms.for_subscriber(all, true);
  EXPECT_EQ(one.get(), two.get());
  EXPECT_EQ(one.get(), stored.get()) << "the stored block is sent as received, not re-encoded";
  EXPECT_EQ(n, 10u);
  const PacketPtr v1 = forms.for_subscriber(all, false, &n);
  EXPECT_EQ(v1->samples_size(), 10);
  EXPECT_TRUE(v1->events().empty());
  EXPECT_EQ(v1.get(), forms.for_subscriber(all, false).get());
  SubscriptionFilter api;
  api.service = "api";
  const PacketPtr subset = forms.for_subscriber(api, true, &n);
  EXPECT_EQ(n, 5u);
  mcp::v1::EventBlock b;
  ASSERT_TRUE(b.ParseFromString(subset->events()));
  EXPECT_EQ(b.events_size(), 5);
  EXPECT_EQ(subset->sequence(), 3u);
}

TEST(PacketForms, V1PacketGivesCompactSubscribersABlock) {
  auto stored = std::make_shared<mcp::v1::SamplePacket>();
  block_to_samples(compact_block(4), "a", stored->mutable_samples());
  PacketForms forms(stored);
  const PacketPtr c = forms.for_subscriber(SubscriptionFilter{}, true);
  mcp::v1::EventBlock b;
  ASSERT_TRUE(b.ParseFromString(c->events()));
  EXPECT_TRUE(check_event_block(b).ok());
  EXPECT_EQ(b.events_size(), 4);
  EXPECT_EQ(c->samples_size(), 0);
}

}  // namespace
}  // namespace mcp::broker
