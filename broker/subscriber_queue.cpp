#include "broker/subscriber_queue.h"

namespace mcp::broker {

SubscriberQueue::SubscriberQueue(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

void SubscriberQueue::push(PacketPtr packet, uint64_t events) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (packets_.size() >= capacity_) {
      const uint64_t samples = packets_.front().second;
      packets_.pop_front();
      ++pending_.packets;
      pending_.samples += samples;
      ++total_.packets;
      total_.samples += samples;
    }
    packets_.emplace_back(std::move(packet), events);
  }
  cv_.notify_one();
}

PacketPtr SubscriberQueue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !packets_.empty() || closed_; });
  if (packets_.empty()) return nullptr;
  PacketPtr p = std::move(packets_.front().first);
  packets_.pop_front();
  return p;
}

void SubscriberQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool SubscriberQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
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
