// Forwarder: the EventSink that ships kept events to an mcp-broker over gRPC.
//
// consume() converts the event and appends it to a bounded in-memory queue (never blocks; when
// the queue is full the oldest queued event is dropped and counted). A batching thread closes a
// batch at `batch_count` events or `batch_age`, and writes it ahead into the spool (segment files
// with CRC32 when `spool_dir` is set, memory otherwise), whose offset becomes the batch sequence.
// A sender thread streams unacknowledged batches in order to the broker; acks release them from
// the spool. On disconnect it backs off exponentially with jitter, moves to the next broker
// address and replays every unacknowledged batch in order; the broker deduplicates by
// (agent id, sequence), so a batch whose ack was lost is delivered once. When the spool is full
// its oldest batches are dropped and counted in `dropped_oldest`, never silently.
// flush() waits (up to flush_timeout) until every accepted event is acknowledged; with a spool
// directory anything not yet acknowledged stays on disk and is replayed by the next run.
// No gRPC or protobuf types appear here: the generated headers stay inside forward/*.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/sink.h"

namespace mcp {

// TLS for gRPC clients and servers; empty paths mean plaintext. cert+key on a client is mTLS.
struct TlsFiles {
  std::string ca;    // PEM CA bundle that signed the peer
  std::string cert;  // PEM certificate chain of this end
  std::string key;   // PEM private key of this end
  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// A sampling policy pushed by the broker: apply to the kernel maps of matching probes.
struct PolicyUpdate {
  std::string service;         // empty: every service
  std::string probe;           // empty: every probe
  double sampling_rate = 0;    // 0: unset
  double target_qps = 0;       // 0: unset
};

struct ForwarderOptions {
  std::vector<std::string> brokers;             // host:port, first preferred; fail over in order
  std::string agent_id;                         // empty: hostname
  size_t batch_count = 512;
  std::chrono::nanoseconds batch_age = std::chrono::milliseconds(20);
  // While the broker has acknowledged everything sent, a batch closes after only
  // this long: light traffic is not held for batch_age; under load batches grow.
  std::chrono::nanoseconds batch_linger = std::chrono::milliseconds(1);
  bool gzip = true;
  size_t queue_capacity = 65536;                // events held in memory before batching
  std::filesystem::path spool_dir;              // empty: spool in memory
  uint64_t spool_max_bytes = 256ull << 20;
  uint64_t spool_segment_bytes = 4ull << 20;
  size_t max_in_flight = 64;                    // unacknowledged batches on the wire
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  std::chrono::milliseconds flush_timeout{10000};
  TlsFiles tls;
  std::string token_file;                       // bearer token, first line of the file
  std::function<void(const PolicyUpdate&)> on_policy;  // called on the receiving thread
  // The broker's packed HLC on each message, for the agent's clock to merge, so
  // events stamped after an ack are ordered after the broker's send.
  std::function<void(uint64_t)> on_broker_hlc;
};

struct ForwarderStats {
  uint64_t queued = 0;          // events waiting in memory for a batch
  uint64_t spooled_bytes = 0;   // batches stored and not yet acknowledged
  uint64_t spooled_batches = 0;
  uint64_t sent = 0;            // events written to a stream (replays count again)
  uint64_t acked = 0;           // events acknowledged by a broker
  uint64_t dropped_oldest = 0;  // events lost to a full queue or a full spool
  uint64_t corrupt_batches = 0; // spool records failing their checksum
  uint64_t forward_errors = 0;  // broken streams and failed connects
  uint64_t reconnects = 0;      // streams opened after the first
  bool connected = false;
  std::string broker;           // address of the current or last stream
};

// Splits "a:1,b:2" into addresses; throws mcp::Error (usage) on an empty list.
std::vector<std::string> parse_broker_list(const std::string& text);

class Forwarder : public EventSink {
 public:
  // Validates options (usage error), opens the spool (runtime error) and starts its threads.
  explicit Forwarder(ForwarderOptions options);
  ~Forwarder() override;  // flushes, then stops
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  void consume(const Event& event) override;
  void flush() override;
  // Like flush() with an explicit limit; true when everything accepted is acknowledged.
  bool flush_for(std::chrono::milliseconds timeout);

  ForwarderStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Forwarder> make_forwarder(ForwarderOptions options);

}  // namespace mcp
