#include "broker/ingest/event_block.h"

#include <gtest/gtest.h>

#include "broker/fanout/packet_forms.h"
#include "common/event.h"
#include "../../support/compact_block.h"

namespace mcp::broker {
namespace {

using mcp::test::compact_block;

Verdict parse(const mcp::v1::EventBlock& block, mcp::v1::EventBlock* out, PublishLimits limits = {}) {
  return parse_event_block(block.SerializeAsString(), limits, out);
}

// The broker's part of ingest: events counted before the block is parsed (kTooLarge), bytes
// that are no block, and the wire validator's refusals as kInvalid (its cases: tests/unit/wire).
TEST(EventBlock, HostileIndicesAndCountsAreRefused) {
  mcp::v1::EventBlock out;
  auto bad = compact_block(2);
  bad.mutable_events(1)->set_probe(12);  // one past the dictionary
  const Verdict v = parse(bad, &out);
  EXPECT_EQ(v.code, Verdict::kInvalid);
  EXPECT_EQ(v.reason, "event 1: probe index 12 out of range");
  bad = compact_block(2);
  bad.mutable_events(0)->set_threshold(0);
  EXPECT_EQ(parse(bad, &out).code, Verdict::kInvalid);
  EXPECT_EQ(check_event_block(bad).code, Verdict::kInvalid);
  PublishLimits small;
  small.max_batch_samples = 5;
  EXPECT_EQ(parse(compact_block(6), &out, small).code, Verdict::kTooLarge);
  EXPECT_TRUE(parse(compact_block(5), &out, small).ok());
  const std::string garbage = "\x1a\xff\xff\xff\xff\x0f";  // events field longer than the bytes
  EXPECT_EQ(parse_event_block(garbage, {}, &out).code, Verdict::kInvalid);
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
