#include "broker/wake_timer.h"

namespace mcp::broker {

WakeTimer::WakeTimer() : thread_([this] { run(); }) {}

WakeTimer::~WakeTimer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void WakeTimer::at(std::chrono::steady_clock::time_point when, std::weak_ptr<SubscriberQueue> queue) {
  bool earliest = false;
  {
    std::lock_guard lock(mu_);
    earliest = due_.empty() || when < due_.top().first;
    due_.emplace(when, std::move(queue));
  }
  if (earliest) cv_.notify_one();
}

void WakeTimer::run() {
  std::unique_lock lock(mu_);
  std::vector<std::weak_ptr<SubscriberQueue>> ready;
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    if (cv_.wait_until(lock, due_.top().first) == std::cv_status::no_timeout) continue;  // re-check
    const auto now = std::chrono::steady_clock::now();
    while (!due_.empty() && due_.top().first <= now) {
      ready.push_back(due_.top().second);
      due_.pop();
    }
    lock.unlock();
    for (auto& q : ready)
      if (auto queue = q.lock()) queue->flush();
    ready.clear();
    lock.lock();
  }
}

}  // namespace mcp::broker
