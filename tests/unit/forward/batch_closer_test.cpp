// When the forwarder closes its open block (forward/batch_closer.h), on a fake clock: a full
// block at once, at light traffic one batch per acknowledgement, under heavy traffic not before
// the gap, by age otherwise, and the timer's "look again" deadline for each case.
#include <gtest/gtest.h>

#include "forward/batch_closer.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using Action = BatchCloser::Action;

struct FakeClock {
  BatchCloser::TimePoint now = BatchCloser::TimePoint{} + 1h;
  void advance(std::chrono::nanoseconds d) { now += d; }
};

BatchCloser::Rules rules() {
  BatchCloser::Rules r;
  r.max_events = 8;
  r.age = 20ms;
  r.linger = 1ms;
  r.burst = 4;
  r.gap = 2ms;
  return r;
}

class BatchCloserTest : public ::testing::Test {
 protected:
  // Adds `n` events to the open block; returns the last answer.
  Action add(size_t n) {
    Action last = Action::kKeep;
    for (size_t i = 0; i < n; ++i) last = closer.added(++open);
    return last;
  }
  // The caller closes the block, as the forwarder does on kClose, a flush or counters.
  void close() {
    closer.closed(open);
    open = 0;
  }

  FakeClock clock;
  BatchCloser closer{rules(), [this] { return clock.now; }};
  size_t open = 0;  // events in the open block
};

TEST_F(BatchCloserTest, AFullBlockClosesAtOnceWhateverTheWire) {
  closer.burst_ended(0, false);  // a poll_done() caller
  EXPECT_EQ(add(7), Action::kKeep);
  EXPECT_EQ(add(1), Action::kClose);
}

TEST_F(BatchCloserTest, AtLightTrafficEachAcknowledgementReleasesOneBatch) {
  // Bursts of one event (batches stay below `burst`) end while the previous batch is still on
  // the wire: the block waits for the acknowledgement, which closes it, so every ack carries
  // one batch away.
  bool wire_idle = true;
  int batches = 0;
  for (int ack = 0; ack < 5; ++ack) {
    add(1);
    const Action at_burst_end = closer.burst_ended(open, wire_idle);
    if (ack == 0) {
      ASSERT_EQ(at_burst_end, Action::kClose) << "an idle wire takes the block at once";
    } else {
      ASSERT_EQ(at_burst_end, Action::kKeep) << "batch " << batches << " is still unacknowledged";
      clock.advance(300us);
      add(1);  // another burst while waiting
      ASSERT_EQ(closer.burst_ended(open, wire_idle), Action::kKeep);
      wire_idle = true;  // the acknowledgement
      ASSERT_EQ(closer.wire_idle(open), Action::kClose);
    }
    close();
    ++batches;
    wire_idle = false;  // the batch is on the wire
    clock.advance(300us);
  }
  EXPECT_EQ(batches, 5);
  EXPECT_EQ(closer.wire_idle(0), Action::kKeep) << "an empty block never closes";
}

TEST_F(BatchCloserTest, UnderHeavyTrafficAnIdleWireWaitsForTheGapAndTheTimerClosesAtItsEnd) {
  closer.burst_ended(0, true);
  add(4);  // burst events: heavy
  ASSERT_EQ(closer.burst_ended(open, true), Action::kClose);
  close();
  const auto closed_at = clock.now;

  clock.advance(500us);
  add(3);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kTime) << "the timer must learn the gap's end";
  EXPECT_EQ(closer.burst_ended(open, true), Action::kKeep) << "once per block";
  EXPECT_EQ(closer.wire_idle(open), Action::kKeep);
  BatchCloser::Due due = closer.due(open, true);
  EXPECT_FALSE(due.close);
  EXPECT_EQ(due.next, closed_at + 2ms) << "look again at the gap's end";

  clock.now = closed_at + 2ms;
  due = closer.due(open, true);
  EXPECT_TRUE(due.close);
  EXPECT_EQ(due.next, clock.now + BatchCloser::kIdlePoll);
  close();  // 3 events: light again

  add(1);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kClose) << "after a light batch nothing waits";
}

TEST_F(BatchCloserTest, AfterTheGapAHeavyBlockClosesAtTheBurstsEnd) {
  closer.burst_ended(0, true);
  add(4);
  close();
  clock.advance(2ms);
  add(1);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kClose);
}

TEST_F(BatchCloserTest, OnABusyWireABlockClosesAtItsAge) {
  closer.burst_ended(0, false);
  add(1);
  const auto first = clock.now;
  clock.advance(5ms);
  add(2);
  EXPECT_EQ(closer.burst_ended(open, false), Action::kKeep);
  BatchCloser::Due due = closer.due(open, false);
  EXPECT_FALSE(due.close);
  EXPECT_EQ(due.next, first + 20ms) << "the age counts from the first event";
  clock.now = first + 20ms;
  EXPECT_EQ(closer.burst_ended(open, false), Action::kClose);
  EXPECT_TRUE(closer.due(open, false).close);
}

TEST_F(BatchCloserTest, WithoutBurstEndsTheTimerClosesByLingerOnAnIdleWireAndByAgeOtherwise) {
  EXPECT_EQ(add(1), Action::kTime) << "no poll_done() caller: the timer owns the block";
  EXPECT_EQ(add(1), Action::kKeep);
  const auto first = clock.now;
  EXPECT_EQ(closer.due(open, true).next, first + 1ms);
  EXPECT_EQ(closer.due(open, false).next, first + 20ms);
  clock.advance(1ms);
  EXPECT_TRUE(closer.due(open, true).close);
  EXPECT_FALSE(closer.due(open, false).close);
}

TEST_F(BatchCloserTest, WithoutBurstEndsHeavyTrafficLingersUntilTheGapsEndAtMostTheAge) {
  add(4);
  close();  // heavy
  const auto closed_at = clock.now;
  add(1);
  // linger (1 ms) is shorter than the gap (2 ms from the last close): the gap's end wins.
  EXPECT_EQ(closer.due(open, true).next, closed_at + 2ms);
  clock.advance(1ms);
  EXPECT_FALSE(closer.due(open, true).close);
  clock.advance(1ms);
  EXPECT_TRUE(closer.due(open, true).close);
}

TEST_F(BatchCloserTest, TheTimerLooksAgainAtLeastEveryIdlePoll) {
  EXPECT_EQ(closer.due(0, true).next, clock.now + BatchCloser::kIdlePoll) << "no block";
  closer.burst_ended(0, false);
  add(1);
  // Age 20 ms, within the idle poll: the block's deadline.
  EXPECT_EQ(closer.due(open, false).next, clock.now + 20ms);
  BatchCloser slow(BatchCloser::Rules{8, 200ms, 1ms, 4, 2ms}, [this] { return clock.now; });
  slow.burst_ended(0, false);
  slow.added(1);
  EXPECT_EQ(slow.due(1, false).next, clock.now + BatchCloser::kIdlePoll) << "deadline beyond the poll";
}

TEST_F(BatchCloserTest, AFlushedBlockCountsAsTheLastBatchForTheGap) {
  closer.burst_ended(0, true);
  add(5);
  close();  // flushed with 5 events (heavy): the next block waits for the gap
  add(1);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kTime);
  clock.advance(2ms);
  EXPECT_TRUE(closer.due(open, true).close);
  close();  // a flush of 1 event: light
  add(1);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kClose);
  close();
  // A counters-only batch (no events) after a heavy one is light as well.
  add(4);
  close();
  closer.closed(0);
  add(1);
  EXPECT_EQ(closer.burst_ended(open, true), Action::kClose);
}

}  // namespace
}  // namespace mcp
