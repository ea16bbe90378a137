// WakeTimer: one thread that runs SubscriberQueue::flush() at the times the queues ask for
// (their linger, subscriber_queue.h), for every subscription of the broker: lingering costs one
// timer, not a thread or a timer per subscriber. A queue gone by then is skipped. The thread is
// woken only when a new deadline comes before every pending one. Thread-safe.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "broker/subscriber_queue.h"

namespace mcp::broker {

class WakeTimer {
 public:
  WakeTimer();
  ~WakeTimer();  // stops; pending wake-ups are not run
  WakeTimer(const WakeTimer&) = delete;
  WakeTimer& operator=(const WakeTimer&) = delete;

  void at(std::chrono::steady_clock::time_point when, std::weak_ptr<SubscriberQueue> queue);

 private:
  using Due = std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<SubscriberQueue>>;
  struct Later {
    bool operator()(const Due& a, const Due& b) const { return a.first > b.first; }
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Due, std::vector<Due>, Later> due_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace mcp::broker
