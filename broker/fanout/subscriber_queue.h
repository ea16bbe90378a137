// SubscriberQueue: one subscriber's bounded queue of packets, between whatever feeds it (the
// embedded backend at store time, a JetStream consumer) and the subscription's writer (the
// callback reactor of subscription_stream.h), with no thread of its own.
// - push() never blocks the publisher: when full, the oldest packet is dropped and counted
//   (packets and the events in them), so a slow consumer loses only its own oldest data and
//   learns how much through take_dropped().
// - push_wait() is for a source with flow control (JetStream): it waits for room instead.
// - pop() never blocks: with nothing queued it returns nullptr and arms the ready callback, which
//   the next push() or close() then runs once, outside the lock, on the pushing thread. So a
//   writer is woken once per idle period, not per packet, and never two at a time.
// - With a linger (set_linger), the first push after an idle period does not wake the writer
//   but asks `schedule` to call flush() `linger` later, so the packets pushed meanwhile share
//   one write; kWakeAt queued packets wake it at once. The queue reads no clock: "later" is
//   the scheduler's (wake_timer.h, on BrokerOptions::clock).
// Thread-safe.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <grpcpp/support/status.h>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

using PacketPtr = std::shared_ptr<const mcp::v1::SamplePacket>;

struct DropCount {
  uint64_t packets = 0;
  uint64_t samples = 0;
};

class SubscriberQueue {
 public:
  explicit SubscriberQueue(size_t capacity, std::function<void()> on_ready = {});

  // `events`: what the packet holds (samples or compact events), counted when it is dropped.
  void push(PacketPtr packet, uint64_t events);
  void push(PacketPtr packet) { const auto n = static_cast<uint64_t>(packet->samples_size()); push(std::move(packet), n); }
  static constexpr size_t kWakeAt = 64;
  // Asked to call flush() once `after` (the linger) has passed.
  using Schedule = std::function<void(std::chrono::nanoseconds after)>;
  // Before the first push.
  void set_linger(std::chrono::milliseconds linger, Schedule schedule);
  // The scheduled wake-up: wakes an idle writer when anything is queued.
  void flush();

  // Waits while the queue is full; false (packet not queued) once closed.
  bool push_wait(PacketPtr packet, uint64_t events);
  // The next packet; nullptr when none is queued: *ended then says the queue is closed and
  // drained (the writer finishes), else the ready callback is armed.
  PacketPtr pop(bool* ended);
  // Up to `max` packets appended to *out (with their event counts); the same otherwise.
  size_t pop_some(std::vector<std::pair<PacketPtr, uint64_t>>* out, size_t max, bool* ended);
  // No more packets are taken; the writer, woken, drains what is queued and ends with `status`.
  void close(grpc::Status status = grpc::Status::OK);
  bool closed() const;
  grpc::Status end_status() const;  // what close() was given
  // Forgets the ready callback: returns once no push is running it.
  void detach();

  // Drops since the previous call (reset to zero), and the total since creation.
  DropCount take_dropped();
  DropCount total_dropped() const;
  size_t size() const;

 private:
  void drop_oldest_locked();
  // After a push: whether to wake the writer now (a linger schedules it instead).
  // *schedule: whether to ask schedule_ for a flush() (the first push of an idle period).
  bool wake_after_push_locked(bool* schedule);
  void wake(bool schedule, bool now);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable room_;
  std::deque<std::pair<PacketPtr, uint64_t>> packets_;
  std::function<void()> on_ready_;
  std::mutex ready_mu_;  // held while on_ready_ runs, so detach() can wait it out
  bool armed_ = false;   // the writer found nothing and waits for on_ready_
  std::chrono::milliseconds linger_{0};
  Schedule schedule_;
  bool scheduled_ = false;  // a flush() is due
  DropCount pending_;
  DropCount total_;
  bool closed_ = false;
  grpc::Status end_;
};

}  // namespace mcp::broker
