#include "broker/ingest/downsample.h"

#include <gtest/gtest.h>

#include "common/event.h"

namespace mcp::broker {
namespace {

mcp::v1::SamplePacket make_packet(int n, uint64_t threshold) {
  mcp::v1::SamplePacket p;
  const BatchEventIds id_of("agent", 7);
  for (int i = 0; i < n; ++i) {
    auto* s = p.add_samples();
    s->set_event_id(id_of(static_cast<uint32_t>(i)));
    s->set_threshold(threshold);
    s->set_service(i % 2 ? "api" : "db");
    (*s->mutable_tags())["zone"] = i % 3 ? "a" : "b";
  }
  return p;
}

double total_weight(const mcp::v1::SamplePacket& p) {
  double w = 0;
  for (const auto& s : p.samples()) w += 1.0 / threshold_to_probability(s.threshold());
  return w;
}

TEST(Downsample, RateKeepsAboutThatFractionAndAdjustedCountStaysExact) {
  // Kernel already kept half (threshold 2^63); the subscriber asks for 10% of that.
  const auto in = make_packet(100000, uint64_t{1} << 63);
  SubscriptionFilter f;
  f.rate = 0.1;
  mcp::v1::SamplePacket out;
  ASSERT_TRUE(filter_packet(in, f, &out));
  EXPECT_NEAR(out.samples_size(), 10000, 400);
  // Sum of weights estimates the events before both sampling stages: 100000 / 0.5.
  EXPECT_NEAR(total_weight(out), 200000.0, 200000.0 * 0.04);
  EXPECT_NEAR(1.0 / threshold_to_probability(out.samples(0).threshold()), 20.0, 1e-6);
}

TEST(Downsample, SameRateKeepsTheSameEventsEveryTime) {
  const auto in = make_packet(1000, UINT64_MAX);
  SubscriptionFilter f;
  f.rate = 0.3;
  mcp::v1::SamplePacket a, b;
  filter_packet(in, f, &a);
  filter_packet(in, f, &b);
  ASSERT_EQ(a.samples_size(), b.samples_size());
  for (int i = 0; i < a.samples_size(); ++i)
    EXPECT_EQ(a.samples(i).event_id(), b.samples(i).event_id());
}

TEST(Downsample, TraceIdDecidesWhenPresentSoATraceIsKeptWhole) {
  mcp::v1::SamplePacket in;
  for (int i = 0; i < 200; ++i) {
    auto* s = in.add_samples();
    s->set_trace_id(static_cast<uint64_t>(i / 10) + 1);  // 20 traces of 10 events (0: none)
    s->set_event_id(static_cast<uint64_t>(i) + 1000);
  }
  SubscriptionFilter f;
  f.rate = 0.5;
  mcp::v1::SamplePacket out;
  filter_packet(in, f, &out);
  std::map<uint64_t, int> per_trace;
  for (const auto& s : out.samples()) ++per_trace[s.trace_id()];
  for (const auto& [trace, n] : per_trace) EXPECT_EQ(n, 10) << "trace " << trace;
}

TEST(Downsample, ServiceAndTagFiltersSelectMatchingSamplesOnly) {
  const auto in = make_packet(30, UINT64_MAX);
  SubscriptionFilter f;
  f.service = "api";
  f.tags["zone"] = "b";
  mcp::v1::SamplePacket out;
  ASSERT_TRUE(filter_packet(in, f, &out));
  for (const auto& s : out.samples()) {
    EXPECT_EQ(s.service(), "api");
    EXPECT_EQ(s.tags().at("zone"), "b");
  }
  EXPECT_EQ(out.samples_size(), 5);  // odd i divisible by 3 below 30
  EXPECT_EQ(out.samples(0).threshold(), UINT64_MAX);  // rate 1 leaves weights alone
}

}  // namespace
}  // namespace mcp::broker
