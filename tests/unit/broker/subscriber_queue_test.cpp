#include "broker/fanout/subscriber_queue.h"
#include "broker/fanout/wake_timer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "clock/clock_source.h"

namespace mcp::broker {
namespace {

PacketPtr packet(uint64_t offset, int samples) {
  auto p = std::make_shared<mcp::v1::SamplePacket>();
  p->set_offset(offset);
  for (int i = 0; i < samples; ++i) p->add_samples();
  return p;
}

PacketPtr pop(SubscriberQueue& q) {
  bool ended = false;
  return q.pop(&ended);
}

TEST(SubscriberQueue, OverflowDropsTheOldestAndCountsPacketsAndSamples) {
  SubscriberQueue q(3);
  for (uint64_t i = 1; i <= 5; ++i) q.push(packet(i, 10));
  const DropCount dropped = q.take_dropped();
  EXPECT_EQ(dropped.packets, 2u);
  EXPECT_EQ(dropped.samples, 20u);
  // The newest three remain, in order.
  EXPECT_EQ(pop(q)->offset(), 3u);
  EXPECT_EQ(pop(q)->offset(), 4u);
  EXPECT_EQ(pop(q)->offset(), 5u);
  EXPECT_EQ(pop(q), nullptr);
}

TEST(SubscriberQueue, TakeDroppedReportsEachDropOnceButTotalKeepsThem) {
  SubscriberQueue q(1);
  q.push(packet(1, 1));
  q.push(packet(2, 1));
  EXPECT_EQ(q.take_dropped().packets, 1u);
  EXPECT_EQ(q.take_dropped().packets, 0u);
  EXPECT_EQ(q.total_dropped().packets, 1u);
}

TEST(SubscriberQueue, CloseLetsTheWriterDrainThenSaysEndedWithTheStatus) {
  SubscriberQueue q(4);
  q.push(packet(1, 1));
  q.close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  q.push(packet(2, 1));  // after close: not taken
  bool ended = true;
  EXPECT_EQ(q.pop(&ended)->offset(), 1u);
  EXPECT_FALSE(ended);
  EXPECT_EQ(q.pop(&ended), nullptr);
  EXPECT_TRUE(ended);
  EXPECT_EQ(q.end_status().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// The writer is woken once per idle period: only after it found the queue empty, once.
TEST(SubscriberQueue, WakesAnIdleWriterOnceAndABusyOneNever) {
  int wakes = 0;
  SubscriberQueue q(8, [&] { ++wakes; });
  q.push(packet(1, 1));
  EXPECT_EQ(wakes, 0);  // the writer has not looked yet: it will find this one
  ASSERT_NE(pop(q), nullptr);
  q.push(packet(2, 1));
  EXPECT_EQ(wakes, 0);  // busy with packet 1 (it has not found the queue empty)
  ASSERT_NE(pop(q), nullptr);
  EXPECT_EQ(pop(q), nullptr);  // idle now
  q.push(packet(3, 1));
  q.push(packet(4, 1));
  EXPECT_EQ(wakes, 1);
  q.close();
  EXPECT_EQ(wakes, 1);  // woken already, not yet idle again
  EXPECT_NE(pop(q), nullptr);
  EXPECT_NE(pop(q), nullptr);
  bool ended = false;
  EXPECT_EQ(q.pop(&ended), nullptr);
  EXPECT_TRUE(ended);
}

TEST(SubscriberQueue, CloseWakesAnIdleWriterAndDetachStopsWakes) {
  int wakes = 0;
  SubscriberQueue q(8, [&] { ++wakes; });
  EXPECT_EQ(pop(q), nullptr);
  q.close();
  EXPECT_EQ(wakes, 1);
  SubscriberQueue r(8, [&] { ++wakes; });
  EXPECT_EQ(pop(r), nullptr);
  r.detach();
  r.push(packet(1, 1));
  EXPECT_EQ(wakes, 1);
}

// Flow control (JetStream): a full queue holds the feeder until the writer takes a packet.
TEST(SubscriberQueue, PushWaitWaitsForRoomAndGivesUpOnClose) {
  SubscriberQueue q(1);
  ASSERT_TRUE(q.push_wait(packet(1, 1), 1));
  std::atomic<bool> second_in{false};
  std::thread feeder([&] { second_in = q.push_wait(packet(2, 1), 1); });
  // "Still blocked" has no event to wait on (the queue shows no waiting feeder): give the feeder
  // a short while to wrongly get in. A pass does not depend on it; a broken push_wait would be
  // caught by it nearly always.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_in.load());
  EXPECT_EQ(pop(q)->offset(), 1u);
  feeder.join();
  EXPECT_TRUE(second_in.load());
  EXPECT_EQ(q.total_dropped().packets, 0u);
  std::thread blocked([&] { EXPECT_FALSE(q.push_wait(packet(3, 1), 1)); });
  q.close();
  blocked.join();
}

// A lingering queue: the first push after an idle period schedules the wake-up instead of
// waking; packets pushed meanwhile wait for it; kWakeAt of them wake the writer at once.
TEST(SubscriberQueue, WithALingerTheFirstPushSchedulesAndFlushWakesOnce) {
  int wakes = 0;
  std::vector<std::chrono::nanoseconds> scheduled;
  SubscriberQueue q(1024, [&] { ++wakes; });
  q.set_linger(std::chrono::milliseconds(20), [&](auto after) { scheduled.push_back(after); });
  EXPECT_EQ(pop(q), nullptr);  // idle
  q.push(packet(1, 1));
  q.push(packet(2, 1));
  EXPECT_EQ(wakes, 0);
  ASSERT_EQ(scheduled.size(), 1u);  // one wake-up per idle period
  EXPECT_EQ(scheduled[0], std::chrono::milliseconds(20));  // the linger, from now
  q.flush();
  EXPECT_EQ(wakes, 1);
  std::vector<std::pair<PacketPtr, uint64_t>> taken;
  bool ended = false;
  EXPECT_EQ(q.pop_some(&taken, 10, &ended), 2u);  // both in one write
  EXPECT_EQ(q.pop_some(&taken, 10, &ended), 0u);  // idle again
  for (uint64_t i = 0; i < SubscriberQueue::kWakeAt; ++i) q.push(packet(10 + i, 1));
  EXPECT_EQ(wakes, 2);  // a full batch does not wait for the linger
  EXPECT_EQ(scheduled.size(), 2u);
  q.flush();  // the scheduled one finds the writer busy: nothing
  EXPECT_EQ(wakes, 2);
}

// On the system's clock (the broker's default): real time.
TEST(WakeTimer, FlushesEachQueueAtItsTimeAndSkipsAQueueThatIsGone) {
  WakeTimer timer;
  std::promise<std::chrono::steady_clock::time_point> woken;
  auto q = std::make_shared<SubscriberQueue>(8, [&] { woken.set_value(std::chrono::steady_clock::now()); });
  q->set_linger(std::chrono::milliseconds(30), [&timer, weak = std::weak_ptr<SubscriberQueue>(q)](auto after) {
    timer.after(after, weak);
  });
  auto gone = std::make_shared<SubscriberQueue>(8, [] { FAIL() << "a destroyed queue was flushed"; });
  gone->set_linger(std::chrono::milliseconds(1), [&timer, weak = std::weak_ptr<SubscriberQueue>(gone)](auto after) {
    timer.after(after, weak);
  });
  EXPECT_EQ(pop(*q), nullptr);
  EXPECT_EQ(pop(*gone), nullptr);
  gone->push(packet(1, 1));
  gone.reset();
  const auto pushed = std::chrono::steady_clock::now();
  q->push(packet(1, 1));
  auto f = woken.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_GE(f.get() - pushed, std::chrono::milliseconds(30));
}

// A lingering subscription on a simulated clock (BrokerOptions::clock): its packet waits for the
// linger to pass on that clock, whatever real time does, and is delivered once it has. poke()
// returns after the timer has read the clock and flushed what was due, so "not yet" is a fact
// here, not a guess after a sleep.
TEST(WakeTimer, ALingeringPacketIsDeliveredOnceTheLingerHasPassedOnTheClockAndNotBefore) {
  auto sim_clock = std::make_shared<clock::SimulatedClockSource>(clock::SimulatedClockOptions{.read_cost_ns = 0});
  WakeTimer timer(sim_clock);
  std::atomic<int> wakes{0};
  auto q = std::make_shared<SubscriberQueue>(8, [&] { ++wakes; });
  constexpr auto kLinger = std::chrono::seconds(10);  // real seconds would fail the test's limit
  q->set_linger(kLinger, [&timer, weak = std::weak_ptr<SubscriberQueue>(q)](auto after) { timer.after(after, weak); });
  EXPECT_EQ(pop(*q), nullptr);  // the writer is idle
  q->push(packet(1, 1));
  EXPECT_EQ(timer.pending(), 1u);

  sim_clock->advance(std::chrono::nanoseconds(kLinger - std::chrono::milliseconds(1)).count());
  timer.poke();
  EXPECT_EQ(wakes.load(), 0) << "the writer was woken 1 ms before the linger passed";
  EXPECT_EQ(timer.pending(), 1u);
  EXPECT_EQ(q->size(), 1u);

  sim_clock->advance(std::chrono::nanoseconds(std::chrono::milliseconds(1)).count());
  timer.poke();
  EXPECT_EQ(wakes.load(), 1) << "the linger passed on the clock and the writer was not woken";
  EXPECT_EQ(timer.pending(), 0u);
  ASSERT_NE(pop(*q), nullptr);

  // The next idle period lingers again, from when its first packet came.
  EXPECT_EQ(pop(*q), nullptr);
  q->push(packet(2, 1));
  timer.poke();
  EXPECT_EQ(wakes.load(), 1);
  sim_clock->advance(std::chrono::nanoseconds(kLinger).count());
  timer.poke();
  EXPECT_EQ(wakes.load(), 2);
}

// Deadlines are ordered on the clock, not by when they were asked for.
TEST(WakeTimer, OnASimulatedClockQueuesAreFlushedInTheOrderOfTheirDeadlines) {
  auto sim_clock = std::make_shared<clock::SimulatedClockSource>(clock::SimulatedClockOptions{.read_cost_ns = 0});
  WakeTimer timer(sim_clock);
  std::atomic<int> long_wakes{0}, short_wakes{0};
  auto slow = std::make_shared<SubscriberQueue>(8, [&] { ++long_wakes; });
  slow->set_linger(std::chrono::milliseconds(500), [&timer, weak = std::weak_ptr<SubscriberQueue>(slow)](auto after) {
    timer.after(after, weak);
  });
  auto fast = std::make_shared<SubscriberQueue>(8, [&] { ++short_wakes; });
  fast->set_linger(std::chrono::milliseconds(100), [&timer, weak = std::weak_ptr<SubscriberQueue>(fast)](auto after) {
    timer.after(after, weak);
  });
  EXPECT_EQ(pop(*slow), nullptr);
  EXPECT_EQ(pop(*fast), nullptr);
  slow->push(packet(1, 1));
  fast->push(packet(1, 1));
  sim_clock->advance(std::chrono::nanoseconds(std::chrono::milliseconds(100)).count());
  timer.poke();
  EXPECT_EQ(short_wakes.load(), 1);
  EXPECT_EQ(long_wakes.load(), 0);
  sim_clock->advance(std::chrono::nanoseconds(std::chrono::milliseconds(400)).count());
  timer.poke();
  EXPECT_EQ(long_wakes.load(), 1);
}

}  // namespace
}  // namespace mcp::broker
