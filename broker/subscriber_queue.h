// SubscriberQueue: one consumer's bounded queue of packets. push() never blocks the publisher:
// when full, the oldest packet is dropped and counted (packets and the samples in them), so a
// slow consumer loses only its own oldest data and learns how much through take_dropped().
// Thread-safe; pop() waits with a timeout so the writer can notice cancellation.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

using PacketPtr = std::shared_ptr<const mcp::v1::SamplePacket>;

struct DropCount {
  uint64_t packets = 0;
  uint64_t samples = 0;
};

class SubscriberQueue {
 public:
  explicit SubscriberQueue(size_t capacity);

  // `events`: what the packet holds (samples or compact events), counted when it is dropped.
  void push(PacketPtr packet, uint64_t events);
  void push(PacketPtr packet) { const auto n = static_cast<uint64_t>(packet->samples_size()); push(std::move(packet), n); }
  // The next packet, or nullptr on timeout or after close() once drained.
  PacketPtr pop(std::chrono::milliseconds timeout);
  void close();
  bool closed() const;

  // Drops since the previous call (reset to zero), and the total since creation.
  DropCount take_dropped();
  DropCount total_dropped() const;
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<PacketPtr, uint64_t>> packets_;
  DropCount pending_;
  DropCount total_;
  bool closed_ = false;
};

}  // namespace mcp::broker
