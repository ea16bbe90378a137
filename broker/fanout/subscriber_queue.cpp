#include "broker/fanout/subscriber_queue.h"

namespace mcp::broker {

SubscriberQueue::SubscriberQueue(size_t capacity, std::function<void()> on_ready)
    : capacity_(capacity == 0 ? 1 : capacity), on_ready_(std::move(on_ready)) {}

void SubscriberQueue::drop_oldest_locked() {
  const uint64_t samples = packets_.front().second;
  packets_.pop_front();
  ++pending_.packets;
  pending_.samples += samples;
  ++total_.packets;
  total_.samples += samples;
}

void SubscriberQueue::set_linger(std::chrono::milliseconds linger, Schedule schedule) {
  std::lock_guard lock(mu_);
  linger_ = linger;
  schedule_ = std::move(schedule);
}

bool SubscriberQueue::wake_after_push_locked(bool* schedule) {
  if (!armed_) return false;
  if (linger_.count() == 0 || !schedule_ || packets_.size() >= kWakeAt) {
    armed_ = false;
    return true;
  }
  if (!scheduled_) {
    scheduled_ = true;
    *schedule = true;
  }
  return false;
}

// Outside mu_: the writer takes it; the scheduler may take its own lock.
void SubscriberQueue::wake(bool schedule, bool now) {
  if (schedule) schedule_(linger_);  // set before the first push, never changed after
  if (now) {
    std::lock_guard ready(ready_mu_);
    if (on_ready_) on_ready_();
  }
}

void SubscriberQueue::push(PacketPtr packet, uint64_t events) {
  bool now = false;
  bool schedule = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (packets_.size() >= capacity_) drop_oldest_locked();
    packets_.emplace_back(std::move(packet), events);
    now = wake_after_push_locked(&schedule);
  }
  wake(schedule, now);
}

bool SubscriberQueue::push_wait(PacketPtr packet, uint64_t events) {
  bool now = false;
  bool schedule = false;
  {
    std::unique_lock lock(mu_);
    room_.wait(lock, [&] { return closed_ || packets_.size() < capacity_; });
    if (closed_) return false;
    packets_.emplace_back(std::move(packet), events);
    now = wake_after_push_locked(&schedule);
  }
  wake(schedule, now);
  return true;
}

void SubscriberQueue::flush() {
  bool now = false;
  {
    std::lock_guard lock(mu_);
    scheduled_ = false;
    if (armed_ && !packets_.empty()) {
      armed_ = false;
      now = true;
    }
  }
  wake(false, now);
}

PacketPtr SubscriberQueue::pop(bool* ended) {
  std::vector<std::pair<PacketPtr, uint64_t>> one;
  return pop_some(&one, 1, ended) ? std::move(one.front().first) : nullptr;
}

size_t SubscriberQueue::pop_some(std::vector<std::pair<PacketPtr, uint64_t>>* out, size_t max, bool* ended) {
  std::lock_guard lock(mu_);
  *ended = false;
  if (packets_.empty()) {
    if (closed_)
      *ended = true;
    else
      armed_ = true;
    return 0;
  }
  size_t n = 0;
  for (; n < max && !packets_.empty(); ++n) {
    out->push_back(std::move(packets_.front()));
    packets_.pop_front();
  }
  room_.notify_all();
  return n;
}

void SubscriberQueue::close(grpc::Status status) {
  bool now = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    end_ = std::move(status);
    now = std::exchange(armed_, false);
  }
  room_.notify_all();
  wake(false, now);
}

void SubscriberQueue::detach() {
  std::lock_guard ready(ready_mu_);
  on_ready_ = nullptr;
}

bool SubscriberQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

grpc::Status SubscriberQueue::end_status() const {
  std::lock_guard lock(mu_);
  return end_;
}

DropCount SubscriberQueue::take_dropped() {
  std::lock_guard lock(mu_);
  DropCount d = pending_;
  pending_ = {};
  return d;
}

DropCount SubscriberQueue::total_dropped() const {
  std::lock_guard lock(mu_);
  return total_;
}

size_t SubscriberQueue::size() const {
  std::lock_guard lock(mu_);
  return packets_.size();
}

}  // namespace mcp::broker
