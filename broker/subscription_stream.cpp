#include "broker/subscription_stream.h"

namespace mcp::broker {

SubscriptionStream::SubscriptionStream(grpc::CallbackServerContext* ctx, size_t queue_packets, Done on_done)
    : ctx_(ctx),
      peer_(ctx->peer()),
      queue_(std::make_shared<SubscriberQueue>(queue_packets, [this] { pump(); })),
      on_done_(std::move(on_done)) {}

SubscriptionStream* SubscriptionStream::create(grpc::CallbackServerContext* ctx, size_t queue_packets,
                                               Done on_done) {
  return new SubscriptionStream(ctx, queue_packets, std::move(on_done));
}

void SubscriptionStream::start(const mcp::v1::SubscriptionRequest& req, Backend& backend, WakeTimer& timer,
                               std::chrono::milliseconds max_linger) {
  batched_ = req.batched();
  const auto linger = std::min(std::chrono::milliseconds(req.linger_ms()), max_linger);
  if (batched_ && linger.count() > 0)
    queue_->set_linger(linger, [&timer, queue = std::weak_ptr<SubscriberQueue>(queue_)](auto after) {
      timer.after(after, queue);
    });
  Backend::Metadata metadata;
  const grpc::Status status = backend.subscribe(req, ctx_->peer(), queue_, &metadata, &feed_);
  if (!status.ok()) {
    finished_ = true;
    Finish(status);
    return;
  }
  for (const auto& [key, value] : metadata) ctx_->AddInitialMetadata(key, value);
  StartSendInitialMetadata();  // the client learns where its live packets start now
  pump();
}

void SubscriptionStream::pump() {
  if (finished_) return;
  while (replaying_) {
    if (backlog_next_ < backlog_.size()) {
      writing_ = std::move(backlog_[backlog_next_++]);
      last_ = writing_->offset();
      StartWrite(writing_.get());
      return;
    }
    backlog_ = feed_->backlog();
    backlog_next_ = 0;
    replaying_ = !backlog_.empty();
  }
  // A batched write takes at most this many packets or bytes (clients accept 4 MiB messages);
  // what it leaves stays in taken_ for the next.
  constexpr size_t kMaxBatch = 256;
  constexpr size_t kMaxBatchBytes = 2u << 20;
  std::vector<PacketPtr> batch;
  while (batch.empty()) {
    if (taken_next_ == taken_.size()) {
      taken_.clear();
      taken_next_ = 0;
      bool ended = false;
      if (queue_->pop_some(&taken_, batched_ ? kMaxBatch : 1, &ended) == 0) {
        if (ended) {
          finished_ = true;
          Finish(queue_->end_status());
        }
        return;  // woken by the next push
      }
    }
    size_t bytes = 0;
    for (; taken_next_ < taken_.size(); ++taken_next_) {
      PacketPtr& p = taken_[taken_next_].first;
      if (p->offset() <= last_) continue;  // the replay wrote it already
      const size_t size = batched_ ? p->ByteSizeLong() : 0;
      if (!batch.empty() && bytes + size > kMaxBatchBytes) break;
      bytes += size;
      last_ = p->offset();
      batch.push_back(std::move(p));
    }
  }
  // The first packet after drops carries their count.
  const DropCount dropped = queue_->take_dropped();
  mcp::v1::SamplePacket* out = nullptr;
  if (batch.size() == 1 && dropped.packets == 0) {
    writing_ = std::move(batch.front());
    StartWrite(writing_.get());
    return;
  }
  if (batch.size() == 1) {
    out = &(with_drops_ = *batch.front());
  } else {
    envelope_.Clear();
    for (const auto& p : batch) *envelope_.add_more() = *p;
    out = envelope_.mutable_more(0);
  }
  if (dropped.packets != 0) {
    out->set_dropped_packets(dropped.packets);
    out->set_dropped_samples(dropped.samples);
  }
  writing_ = nullptr;
  StartWrite(batch.size() == 1 ? &with_drops_ : &envelope_);
}

void SubscriptionStream::OnWriteDone(bool ok) {
  writing_ = nullptr;
  if (ok) {
    pump();
  } else if (!finished_) {  // the client is gone
    finished_ = true;
    Finish(grpc::Status::OK);
  }
}

// Wakes an idle writer so it finishes; one with a write in flight finishes when it fails.
void SubscriptionStream::OnCancel() { queue_->close(grpc::Status(grpc::StatusCode::CANCELLED, "subscriber left")); }

void SubscriptionStream::OnDone() {
  queue_->detach();
  feed_.reset();  // the backend stops pushing
  if (on_done_) on_done_(this);
  delete this;
}

}  // namespace mcp::broker
