#include "subscribe/subscribe_client.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include <spdlog/spdlog.h>

#include "common/backoff.h"
#include "common/error.h"
#include "common/journal_headers.h"
#include "common/sampling_bounds.h"
#include "forward/channel.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp {

SubscribeClient::SubscribeClient(SubscribeOptions options) : options_(std::move(options)) {
  if (options_.brokers.empty()) throw usage_error("subscribe: no broker address");
  if (!valid_sampling_rate(options_.sampling_rate))
    throw usage_error(std::string("--sampling-rate must be in ") + kSamplingRateRange);
  token_ = read_token_file(options_.token_file);
}

SubscribeClient::~SubscribeClient() = default;

void SubscribeClient::stop() {
  stop_ = true;
  std::lock_guard lock(mu_);
  if (context_) context_->TryCancel();
}

SubscribeStats SubscribeClient::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void SubscribeClient::run(const std::function<bool(const mcp::v1::SamplePacket&)>& on_packet) {
  Backoff backoff(options_.backoff_initial, options_.backoff_max, options_.brokers.size());
  bool first = true;
  while (!stop_) {
    const size_t address = backoff.endpoint();
    auto channel = make_channel(options_.brokers[address], options_.tls, false,
                                options_.receive_window_bytes);
    auto stub = mcp::v1::Sampling::NewStub(channel);
    grpc::ClientContext context;
    add_token(context, token_);
    mcp::v1::SubscriptionRequest req;
    req.set_service_name(options_.service);
    req.set_sampling_rate(options_.sampling_rate);
    req.set_queue_packets(options_.queue_packets);
    req.set_compact(options_.compact);
    req.set_batched(true);
    req.set_linger_ms(static_cast<uint32_t>(options_.linger.count()));
    for (const auto& [k, v] : options_.tags) (*req.mutable_tags())[k] = v;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      if (!first) ++stats_.reconnects;
      req.set_resume_after(stats_.last_offset);
      req.set_resume_journal(stats_.journal);
      context_ = &context;
    }
    first = false;
    auto reader = stub->Subscribe(&context, req);
    reader->WaitForInitialMetadata();
    {
      // The first subscription's start: a reconnect resumes from there, not live.
      const auto& meta = context.GetServerInitialMetadata();
      const auto journal = meta.find(std::string(kJournalHeader));
      const auto next = meta.find(std::string(kJournalNextHeader));
      std::lock_guard lock(mu_);
      if (stats_.journal == 0 && journal != meta.end() && next != meta.end()) {
        stats_.journal = std::strtoull(std::string(journal->second.data(), journal->second.size()).c_str(), nullptr, 10);
        const uint64_t start = std::strtoull(std::string(next->second.data(), next->second.size()).c_str(), nullptr, 10);
        if (stats_.last_offset == 0 && start > 0) stats_.last_offset = start - 1;
      }
    }
    // One packet as the broker wrote it alone; false when the consumer wants no more.
    const auto take = [&](const mcp::v1::SamplePacket& p) {
      {
        std::lock_guard lock(mu_);
        stats_.dropped_packets += p.dropped_packets();
        stats_.dropped_samples += p.dropped_samples();
        if (p.journal() != 0 && p.journal() != stats_.journal) {
          // Another journal (the broker lost its state): its offsets start over.
          if (stats_.journal != 0) stats_.last_offset = 0;
          stats_.journal = p.journal();
        }
        if (p.offset() <= stats_.last_offset) return true;  // already delivered
        stats_.last_offset = p.offset();
        ++stats_.packets;
        stats_.samples += static_cast<uint64_t>(p.samples_size());
      }
      return on_packet(p);
    };
    mcp::v1::SamplePacket packet;
    bool keep_going = true;
    bool got_any = false;
    while (keep_going && reader->Read(&packet)) {
      got_any = true;
      if (packet.more_size() == 0) {
        keep_going = take(packet);
        continue;
      }
      for (int i = 0; keep_going && i < packet.more_size(); ++i) keep_going = take(packet.more(i));
    }
    if (!keep_going) context.TryCancel();
    const grpc::Status status = reader->Finish();
    {
      std::lock_guard lock(mu_);
      context_ = nullptr;
    }
    if (!keep_going || stop_) return;
    switch (status.error_code()) {
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
      case grpc::StatusCode::INVALID_ARGUMENT:
      case grpc::StatusCode::UNIMPLEMENTED:
        throw runtime_error("broker refused the subscription: " + status.error_message());
      default:
        break;
    }
    if (!options_.reconnect) {
      if (!status.ok())
        throw runtime_error("subscription to " + options_.brokers[address] +
                            " failed: " + status.error_message());
      return;
    }
    spdlog::warn("subscribe: stream from {} ended ({}); reconnecting", options_.brokers[address],
                 status.ok() ? "closed" : status.error_message());
    if (got_any) backoff.succeeded();
    const auto deadline = std::chrono::steady_clock::now() + backoff.failed();
    while (!stop_ && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace mcp
