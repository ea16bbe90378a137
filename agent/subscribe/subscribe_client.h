// SubscribeClient: a consumer of the broker's Subscribe stream. run() delivers packets in order
// to a callback; when the stream breaks it reconnects (next broker address, exponential backoff
// with jitter) and resumes after the last journal offset it received, skipping anything at or
// below it, so a consumer sees each packet once across broker restarts. Before its first packet it
// resumes from where it first subscribed (the broker's x-mcp-journal-next), and a broker that
// restarted without its journal (another SamplePacket.journal) replays all it has. Drops the broker reports
// for this subscription (its queue overflowed) are summed in stats(). A rejected subscription
// (bad token, bad argument) is not retried: run() throws mcp::Error (runtime).
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "forward/forwarder.h"
#include "mcp/v1/sampling.pb.h"

namespace grpc {
class ClientContext;
}

namespace mcp {

struct SubscribeOptions {
  std::vector<std::string> brokers;
  std::string service;
  std::map<std::string, std::string> tags;
  double sampling_rate = 1.0;
  TlsFiles tls;
  std::string token_file;
  bool reconnect = true;
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{2000};
  // Channel flow-control window in bytes (0: gRPC's default, which grows with bandwidth).
  int receive_window_bytes = 0;
  // Packets the broker may queue for this subscriber (0: the broker's maximum).
  uint32_t queue_packets = 0;
  // Ask for SamplePacket.events (compact "events-v2", wire/event_block.h); a broker that
  // predates it sends samples, so consumers handle both (subscribe/packet_printer.h does).
  bool compact = false;
  // How long the broker may hold a packet so later ones share its write (fewer, larger writes:
  // less broker CPU per subscriber, this much more latency at most). The subscription always
  // takes several packets per message (SubscriptionRequest.batched); on_packet still sees one.
  std::chrono::milliseconds linger{0};
};

struct SubscribeStats {
  uint64_t packets = 0;
  uint64_t samples = 0;
  uint64_t dropped_packets = 0;  // reported by the broker
  uint64_t dropped_samples = 0;
  uint64_t reconnects = 0;
  // The offset resumed after: the last packet's, or where the first subscription started.
  uint64_t last_offset = 0;
  uint64_t journal = 0;  // the journal last_offset counts in (SamplePacket.journal); 0: unknown
};

class SubscribeClient {
 public:
  explicit SubscribeClient(SubscribeOptions options);  // throws mcp::Error (usage) on bad files
  ~SubscribeClient();

  // Blocks until `on_packet` returns false, stop() is called, or (reconnect off) the stream ends.
  void run(const std::function<bool(const mcp::v1::SamplePacket&)>& on_packet);
  void stop();  // thread-safe; makes run() return soon
  SubscribeStats stats() const;

 private:
  SubscribeOptions options_;
  std::string token_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  grpc::ClientContext* context_ = nullptr;
  SubscribeStats stats_;
};

}  // namespace mcp
