#include "broker/fanout/wake_timer.h"

namespace mcp::broker {

WakeTimer::WakeTimer(std::shared_ptr<clock::ClockSource> clock)
    : clock_(clock::clock_or_system(std::move(clock))), thread_([this] { run(); }) {}

WakeTimer::~WakeTimer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  poked_.notify_all();
  thread_.join();
}

void WakeTimer::after(std::chrono::nanoseconds delay, std::weak_ptr<SubscriberQueue> queue) {
  const int64_t when = clock_->monotonic_ns() + delay.count();
  bool earliest = false;
  {
    std::lock_guard lock(mu_);
    earliest = due_.empty() || when < due_.top().first;
    due_.emplace(when, std::move(queue));
  }
  if (earliest) cv_.notify_one();
}

void WakeTimer::poke() {
  std::unique_lock lock(mu_);
  const uint64_t mine = ++pokes_;
  cv_.notify_one();
  poked_.wait(lock, [&] { return stop_ || pokes_done_ >= mine; });
}

size_t WakeTimer::pending() const {
  std::lock_guard lock(mu_);
  return due_.size();
}

// Each round reads the clock, flushes what is due (outside the lock), answers the pokes made
// before it read the clock, then waits for the next deadline, a new earlier one or a poke.
void WakeTimer::run() {
  std::unique_lock lock(mu_);
  std::vector<std::weak_ptr<SubscriberQueue>> ready;
  while (!stop_) {
    const uint64_t pokes = pokes_;
    const int64_t now = clock_->monotonic_ns();
    while (!due_.empty() && due_.top().first <= now) {
      ready.push_back(due_.top().second);
      due_.pop();
    }
    if (!ready.empty()) {
      lock.unlock();
      for (auto& q : ready)
        if (auto queue = q.lock()) queue->flush();
      ready.clear();
      lock.lock();
    }
    if (pokes_done_ < pokes) {
      pokes_done_ = pokes;
      poked_.notify_all();
    }
    if (stop_ || pokes_ != pokes) continue;  // poked meanwhile: another round
    if (due_.empty())
      cv_.wait(lock);
    else
      cv_.wait_for(lock, std::chrono::nanoseconds(due_.top().first - now));  // then re-read the clock
  }
}

}  // namespace mcp::broker
