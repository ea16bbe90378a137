#include "otlp/event_sink.h"

#include <algorithm>
#include <cstdio>

namespace mcp::otlp {

OtlpSink::OtlpSink(ExporterOptions options, Origin origin, size_t block_events,
                   std::chrono::milliseconds grace)
    : exporter_(options), endpoint_(options.endpoint), origin_(std::move(origin)), block_events_(block_events == 0 ? 1 : block_events),
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
  ++consumed_;
  if (encoder_.size() >= block_events_) offer_open_block();
}

void OtlpSink::consume_audit(AuditEntry entry) {
  std::lock_guard lock(mu_);
  ++consumed_;
  exporter_.offer_audit(std::move(entry), origin_);
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

bool OtlpSink::drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) {
  uint64_t consumed = 0;
  {
    std::lock_guard lock(mu_);
    offer_open_block();
    consumed = consumed_;
  }
  // Every consumed event ends exported, failed or dropped; the exporter retries with backoff
  // meanwhile, so wait for that (bounded), then shut it down: whatever is left is dropped.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto end = start + limit;
  bool said = false;
  for (;;) {
    const auto s = exporter_.stats();
    if (s.exported + s.failed + s.dropped >= consumed || give_up() || Clock::now() >= end) break;
    if (!said && Clock::now() - start >= std::chrono::milliseconds(200)) {
      std::fprintf(stderr, "mcp-agent: waiting up to %lld s for the OTLP collector %s to accept %llu events (Ctrl-C again to stop)\n",
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
                   endpoint_.c_str(), static_cast<unsigned long long>(consumed - s.exported - s.failed - s.dropped));
      said = true;
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(10));  // the exporter has no completion signal
  }
  exporter_.shutdown(std::chrono::milliseconds(0));
  return exporter_.stats().exported >= consumed;
}

SinkReport OtlpSink::report() const {
  const auto s = exporter_.stats();
  uint64_t consumed = 0;
  {
    std::lock_guard lock(mu_);
    consumed = consumed_;
  }
  SinkReport r;
  char line[512];
  std::snprintf(line, sizeof(line), "otlp: collector %s, exported %llu, failed %llu, dropped %llu, retries %llu",
                endpoint_.c_str(), (unsigned long long)s.exported, (unsigned long long)s.failed,
                (unsigned long long)s.dropped, (unsigned long long)s.retries);
  r.summary = line;
  if (s.exported < consumed) {
    r.lost = consumed - s.exported;
    std::snprintf(line, sizeof(line),
                  "%llu events undelivered to the OTLP collector %s: %llu refused or out of attempts, %llu "
                  "dropped (full queue, or not sent before shutdown)",
                  (unsigned long long)r.lost, endpoint_.c_str(), (unsigned long long)s.failed,
                  (unsigned long long)(r.lost - std::min(r.lost, s.failed)));
    r.undelivered = line;
  }
  return r;
}

}  // namespace mcp::otlp
