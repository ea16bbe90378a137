// The v1 wire form (wire/samples.h): a checked block as Samples with every string resolved
// and back, the W3C trace id and pod identity intact both ways, the dictionaries rebuilt with
// each distinct string once. v1 subscribers and v1 batches cross the broker through these.
#include "wire/samples.h"

#include <gtest/gtest.h>

#include "../../support/compact_block.h"
#include "wire/block_check.h"
#include "wire/kind.h"

namespace mcp::wire {
namespace {

using mcp::test::compact_block;

TEST(V1Samples, ConvertsToSamplesWithEveryStringResolved) {
  const auto parsed = compact_block(3, 100);
  ASSERT_FALSE(check_block(parsed).has_value());
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

TEST(V1Samples, SamplesRoundTripThroughABlock) {
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(compact_block(7, 1), "a", &samples);
  mcp::v1::EventBlock block;
  samples_to_block(samples, &block);
  EXPECT_FALSE(check_block(block).has_value());
  EXPECT_LT(block.strings_size(), 7 * 3) << "each distinct string is sent once";
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> again;
  block_to_samples(block, "a", &again);
  ASSERT_EQ(again.size(), samples.size());
  for (int i = 0; i < samples.size(); ++i)
    EXPECT_EQ(again[i].SerializeAsString(), samples[i].SerializeAsString()) << i;
}

// The full W3C trace id (both halves) and th survive the broker's Sample <-> block conversions,
// so v1 subscribers and the broker's OTLP export see the application's id.
TEST(V1Samples, TraceIdCrossesTheBrokerBothWays) {
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

TEST(V1Samples, PodIdentityCrossesTheBrokerBothWays) {
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
  ASSERT_FALSE(check_block(block).has_value());
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(block, "a", &samples);
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
  EXPECT_TRUE(check_block(block).has_value());
}

TEST(V1Samples, EmptyDictionariesMeanUnsetAndStillCheck) {
  mcp::v1::EventBlock b;
  auto* e = b.add_events();
  e->set_kind(mcp::v1::EVENT_KIND_UPROBE);
  e->set_threshold(UINT64_MAX);
  ASSERT_FALSE(check_block(b).has_value());
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  block_to_samples(b, "a", &samples);
  EXPECT_EQ(samples[0].probe(), "");
  EXPECT_TRUE(samples[0].tags().empty());
}

// The one kind table: every kind crosses both wire forms under its JSON name; unknown kinds
// have none.
TEST(KindTable, EveryKindCrossesBothWireFormsUnderItsJsonName) {
  int known = 0;
  for (int k = 0; k < 16; ++k) {
    const auto kind = kind_from_wire(k);
    if (!kind) {
      EXPECT_EQ(kind_name(k), "") << k;
      continue;
    }
    ++known;
    EXPECT_EQ(kind_to_wire(*kind), k);
    EXPECT_EQ(kind_name(k), to_string(*kind));
    EXPECT_EQ(kind_from_name(kind_name(k)), kind);
  }
  EXPECT_EQ(known, 5);
  EXPECT_EQ(kind_from_wire(mcp::v1::EVENT_KIND_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(kind_from_name("kprobe"), std::nullopt);
  EXPECT_EQ(kind_name(mcp::v1::EVENT_KIND_USDT), "usdt");
}

// A v1 sample of a kind this side does not know becomes an unknown wire kind, which the
// validator refuses, rather than a uprobe.
TEST(V1Samples, AnUnknownKindNameIsRefusedInABlock) {
  google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
  auto* s = samples.Add();
  s->set_kind("kprobe");
  s->set_threshold(UINT64_MAX);
  mcp::v1::EventBlock block;
  samples_to_block(samples, &block);
  EXPECT_EQ(block.events(0).kind(), mcp::v1::EVENT_KIND_UNSPECIFIED);
  EXPECT_TRUE(check_block(block).has_value());
}

}  // namespace
}  // namespace mcp::wire
