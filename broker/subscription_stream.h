// SubscriptionStream: one Subscribe RPC on gRPC's callback API. It writes the backend's backlog
// (a resumed subscription's journal replay), then its SubscriberQueue, one packet in flight at a
// time; when the queue is empty it waits to be woken by the next push (subscriber_queue.h), so a
// subscriber costs no thread and no wake-up per packet, only a write. Packets at or below the
// last offset written are skipped (a live packet that the replay already sent); a packet after
// drops carries their count (dropped_packets, dropped_samples). The stream ends when the client
// leaves, or when the queue is closed (broker stopping, a JetStream consumer lost) and drained,
// with the status close() was given. Made by create(); deletes itself when gRPC is done.
// A `batched` subscription (SubscriptionRequest.batched) gets every packet queued at a wake-up
// in one message (SamplePacket.more), and with linger_ms its queue waits that long (at most
// the broker's max_linger) after an idle period before waking the writer (wake_timer.h).
#pragma once
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "broker/store/backend.h"
#include "broker/fanout/subscriber_queue.h"
#include "broker/fanout/wake_timer.h"

namespace mcp::broker {

class SubscriptionStream final : public grpc::ServerWriteReactor<mcp::v1::SamplePacket> {
 public:
  // Called once when the RPC is over, after the backend has stopped feeding the queue.
  using Done = std::function<void(SubscriptionStream*)>;

  // `queue_packets`: the queue's capacity. Nothing happens until start().
  static SubscriptionStream* create(grpc::CallbackServerContext* ctx, size_t queue_packets, Done on_done);
  // Subscribes through `backend` (the request already checked) and starts writing; a refusal
  // finishes the RPC with it.
  void start(const mcp::v1::SubscriptionRequest& req, Backend& backend, WakeTimer& timer,
             std::chrono::milliseconds max_linger);

  SubscriberQueue& queue() { return *queue_; }
  const std::string& peer() const { return peer_; }

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  SubscriptionStream(grpc::CallbackServerContext* ctx, size_t queue_packets, Done on_done);
  // Writes the next packet, finishes, or (queue empty) returns to be woken. Never runs twice
  // at once: it runs from start(), from OnWriteDone, or from the queue's wake-up, and the
  // queue wakes only a writer that found it empty with nothing in flight.
  void pump();

  grpc::CallbackServerContext* const ctx_;
  const std::string peer_;
  const std::shared_ptr<SubscriberQueue> queue_;
  std::unique_ptr<Backend::Subscription> feed_;
  Done on_done_;
  std::vector<PacketPtr> backlog_;  // the current replay chunk
  size_t backlog_next_ = 0;
  bool replaying_ = true;
  uint64_t last_ = 0;               // offset of the last packet written
  PacketPtr writing_;               // kept alive until OnWriteDone
  mcp::v1::SamplePacket with_drops_;
  bool batched_ = false;
  mcp::v1::SamplePacket envelope_;  // a batched write's packets (SamplePacket.more)
  std::vector<std::pair<PacketPtr, uint64_t>> taken_;  // popped, not yet written from taken_next_
  size_t taken_next_ = 0;
  bool finished_ = false;
};

}  // namespace mcp::broker
