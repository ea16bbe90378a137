#include "broker/subscription_stream.h"

#include <spdlog/spdlog.h>

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

void SubscriptionStream::start(const mcp::v1::SubscriptionRequest& req, Backend& backend) {
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
  for (;;) {
    bool ended = false;
    PacketPtr packet = queue_->pop(&ended);
    if (!packet) {
      if (ended) {
        finished_ = true;
        Finish(queue_->end_status());
      }
      return;  // woken by the next push
    }
    if (packet->offset() <= last_) continue;
    last_ = packet->offset();
    if (const DropCount dropped = queue_->take_dropped(); dropped.packets != 0) {
      with_drops_ = *packet;
      with_drops_.set_dropped_packets(dropped.packets);
      with_drops_.set_dropped_samples(dropped.samples);
      writing_ = nullptr;
      StartWrite(&with_drops_);
    } else {
      writing_ = std::move(packet);
      StartWrite(writing_.get());
    }
    return;
  }
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
