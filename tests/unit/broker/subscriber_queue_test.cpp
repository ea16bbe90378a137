#include "broker/subscriber_queue.h"

#include <gtest/gtest.h>

namespace mcp::broker {
namespace {

PacketPtr packet(uint64_t offset, int samples) {
  auto p = std::make_shared<mcp::v1::SamplePacket>();
  p->set_offset(offset);
  for (int i = 0; i < samples; ++i) p->add_samples();
  return p;
}

TEST(SubscriberQueue, OverflowDropsTheOldestAndCountsPacketsAndSamples) {
  SubscriberQueue q(3);
  for (uint64_t i = 1; i <= 5; ++i) q.push(packet(i, 10));
  const DropCount dropped = q.take_dropped();
  EXPECT_EQ(dropped.packets, 2u);
  EXPECT_EQ(dropped.samples, 20u);
  // The newest three remain, in order.
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0))->offset(), 3u);
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0))->offset(), 4u);
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0))->offset(), 5u);
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0)), nullptr);
}

TEST(SubscriberQueue, TakeDroppedReportsEachDropOnceButTotalKeepsThem) {
  SubscriberQueue q(1);
  q.push(packet(1, 1));
  q.push(packet(2, 1));
  EXPECT_EQ(q.take_dropped().packets, 1u);
  EXPECT_EQ(q.take_dropped().packets, 0u);
  EXPECT_EQ(q.total_dropped().packets, 1u);
}

TEST(SubscriberQueue, CloseWakesAWaitingReaderAfterDraining) {
  SubscriberQueue q(4);
  q.push(packet(1, 1));
  q.close();
  EXPECT_NE(q.pop(std::chrono::milliseconds(0)), nullptr);
  EXPECT_EQ(q.pop(std::chrono::seconds(5)), nullptr);
  EXPECT_TRUE(q.closed());
}

}  // namespace
}  // namespace mcp::broker
