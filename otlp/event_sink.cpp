#include "otlp/event_sink.h"

namespace mcp::otlp {

OtlpSink::OtlpSink(ExporterOptions options, Origin origin, size_t block_events,
                   std::chrono::milliseconds grace)
    : exporter_(options), origin_(std::move(origin)), block_events_(block_events == 0 ? 1 : block_events),
      interval_(options.batch_interval), grace_(grace) {
  timer_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, interval_);
      if (encoder_.size() > 0 && std::chrono::steady_clock::now() >= opened_ + interval_) offer_open_block();
    }
  });
}

OtlpSink::~OtlpSink() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  timer_.join();
}

void OtlpSink::consume(const Event& event) {
  std::lock_guard lock(mu_);
  if (encoder_.size() == 0) opened_ = std::chrono::steady_clock::now();
  encoder_.add(event);
  if (encoder_.size() >= block_events_) offer_open_block();
}

void OtlpSink::offer_open_block() {
  if (encoder_.size() == 0) return;
  auto block = std::make_shared<mcp::v1::EventBlock>();
  encoder_.finish(block.get());
  exporter_.offer(std::move(block), origin_);
}

void OtlpSink::flush() {
  {
    std::lock_guard lock(mu_);
    offer_open_block();
  }
  exporter_.shutdown(grace_);
}

}  // namespace mcp::otlp
