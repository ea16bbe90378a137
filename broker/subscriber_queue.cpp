#include "broker/subscriber_queue.h"

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

void SubscriberQueue::push(PacketPtr packet, uint64_t events) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (packets_.size() >= capacity_) drop_oldest_locked();
    packets_.emplace_back(std::move(packet), events);
    wake = std::exchange(armed_, false);
  }
  if (wake) {
    std::lock_guard ready(ready_mu_);
    if (on_ready_) on_ready_();
  }
}

bool SubscriberQueue::push_wait(PacketPtr packet, uint64_t events) {
  bool wake = false;
  {
    std::unique_lock lock(mu_);
    room_.wait(lock, [&] { return closed_ || packets_.size() < capacity_; });
    if (closed_) return false;
    packets_.emplace_back(std::move(packet), events);
    wake = std::exchange(armed_, false);
  }
  if (wake) {
    std::lock_guard ready(ready_mu_);
    if (on_ready_) on_ready_();
  }
  return true;
}

PacketPtr SubscriberQueue::pop(bool* ended) {
  std::lock_guard lock(mu_);
  *ended = false;
  if (packets_.empty()) {
    if (closed_)
      *ended = true;
    else
      armed_ = true;
    return nullptr;
  }
  PacketPtr p = std::move(packets_.front().first);
  packets_.pop_front();
  room_.notify_one();
  return p;
}

void SubscriberQueue::close(grpc::Status status) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    end_ = std::move(status);
    wake = std::exchange(armed_, false);
  }
  room_.notify_all();
  if (wake) {
    std::lock_guard ready(ready_mu_);
    if (on_ready_) on_ready_();
  }
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
