// WakeTimer: one thread that runs SubscriberQueue::flush() at the times the queues ask for
// (their linger, subscriber_queue.h), for every subscription of the broker: lingering costs one
// timer, not a thread or a timer per subscriber. A queue gone by then is skipped. The thread is
// woken only when a new deadline comes before every pending one. Thread-safe.
// Time is the monotonic clock of a clock::ClockSource (BrokerOptions::clock): a deadline is due
// once that clock reaches it. The thread waits (due - now) of real time and then reads the clock
// again, so with the system's clock it fires as a steady_clock timer would; a clock that jumps
// (a test's SimulatedClockSource::advance) is noticed at the next wait's end, or at once by
// poke().
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "broker/fanout/subscriber_queue.h"
#include "clock/clock_source.h"

namespace mcp::broker {

class WakeTimer {
 public:
  explicit WakeTimer(std::shared_ptr<clock::ClockSource> clock = nullptr);  // null: the system's
  ~WakeTimer();  // stops; pending wake-ups are not run
  WakeTimer(const WakeTimer&) = delete;
  WakeTimer& operator=(const WakeTimer&) = delete;

  // Runs queue->flush() once `delay` has passed on the clock (from now, as read here).
  void after(std::chrono::nanoseconds delay, std::weak_ptr<SubscriberQueue> queue);
  // Reads the clock again now and flushes every queue that is due by it; returns once that is
  // done, so what was not flushed is not due. For a clock moved by hand (tests). Not from a
  // flush() this timer runs (its own thread: it would wait for itself).
  void poke();
  size_t pending() const;  // wake-ups not yet run

 private:
  using Due = std::pair<int64_t, std::weak_ptr<SubscriberQueue>>;  // clock_'s monotonic ns
  struct Later {
    bool operator()(const Due& a, const Due& b) const { return a.first > b.first; }
  };
  void run();

  const std::shared_ptr<clock::ClockSource> clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;      // the thread: a new earliest deadline, a poke, stop
  std::condition_variable poked_;   // poke(): its round is done
  std::priority_queue<Due, std::vector<Due>, Later> due_;
  uint64_t pokes_ = 0;              // poke() calls made
  uint64_t pokes_done_ = 0;         // of those, how many a finished round has answered
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace mcp::broker
