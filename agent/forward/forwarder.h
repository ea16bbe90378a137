// Forwarder: the EventSink that ships kept events to an mcp-broker over gRPC.
//
// consume() encodes the event into the open compact block (wire/event_block.h, capability
// "events-v2") on the caller's thread, with no per-event message or queue node. A block is
// closed into a Batch and written ahead into the spool (segment files with CRC32 when
// `spool_dir` is set, memory otherwise), whose offset becomes the batch sequence, by whichever
// thread finds it due (the rules live in forward/batch_closer.h): the consumer when it reaches
// `batch_count` or when poll_done() ends a burst while the broker has acknowledged everything
// sent (Nagle's rule, the other way round;
// under heavy traffic not before `batch_gap` after the previous batch); the ack that leaves
// nothing in flight; or the age timer (`batch_age`; `batch_linger` while idle, only for callers
// that never call poll_done(); the gap's end). One sender thread streams
// unacknowledged batches in order to the broker, woken once per batch; a reader thread takes
// the acks, which release batches from the spool. So the data path has one hand-off per batch,
// not one per stage. On disconnect the sender backs off exponentially with jitter, moves to the
// next broker address and replays every unacknowledged batch in order; the broker
// deduplicates by (agent id, sequence), so a batch whose ack was lost is delivered once. When
// the spool is full its oldest batches are dropped and counted in `dropped_oldest`, never
// silently. flush() ships the open block and waits (up to flush_timeout) until every accepted
// event is acknowledged; with a spool directory anything not yet acknowledged stays on disk and
// is replayed by the next run.
// The spool holds each Batch as sent, events still encoded, so the sender never rebuilds
// per-event messages. A spooled batch that cannot be parsed back is skipped, counted
// (unreadable_*) and logged. Every string of an event is repaired to valid UTF-8 before it is
// spooled.
// No gRPC or protobuf types appear here: the generated headers stay inside forward/*.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
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

// A sampling policy pushed by the broker: apply to the kernel maps of matching probes, or,
// `removed`, undo it. The broker says a policy is gone by pushing its key (service, probe) with
// neither rate nor target, which a stored policy never has (proto PolicyPush).
struct PolicyUpdate {
  std::string service;         // empty: every service
  std::string probe;           // empty: every probe
  double sampling_rate = 0;    // 0: unset
  double target_qps = 0;       // 0: unset
  std::map<std::string, std::string> service_labels;  // the probe's tags hold every pair
  std::string trace_id_prefix;  // lowercase hex: a prefix rule (runtime/control_loop.h ProbePolicy)
  bool removed = false;
};

// A broker policy some probes of this agent refused (a trace-id prefix rule on probes without a
// trace-id argument), reported to brokers that take it (PolicyStatus) for the policy's status.
struct PolicyRefusal {
  std::string service, probe, trace_id_prefix;
  std::vector<std::string> refused_by;  // at most 16 named
  std::string reason;
};

// A policy as `mcp-agent policy list` prints the broker's and `run`'s /healthz the agent's:
// "service=S probe=P sampling_rate=R target_qps=N[ trace_id_prefix=HEX]", '*' for an empty
// service or probe.
std::string policy_line(std::string_view service, std::string_view probe, double sampling_rate, double target_qps,
                        std::string_view trace_id_prefix = {});

// gRPC message compression to the broker. None by default: the compact events carry few
// repeated bytes, and on loopback or a fast link gzip costs more CPU than it saves.
enum class Compression { kNone, kGzip };
// "none" or "gzip"; throws mcp::Error (usage) for anything else.
Compression parse_compression(const std::string& name);

struct ForwarderOptions {
  std::vector<std::string> brokers;             // host:port, first preferred; fail over in order
  std::string agent_id;                         // empty: unique_agent_id() (agent_id.h)
  size_t batch_count = 512;                     // events per batch at most
  std::chrono::nanoseconds batch_age = std::chrono::milliseconds(20);
  // For callers that never call poll_done(): while the broker has acknowledged everything
  // sent, a batch closes after only this long, so light traffic is not held for batch_age.
  std::chrono::nanoseconds batch_linger = std::chrono::milliseconds(1);
  // Heavy traffic (the previous batch held at least batch_burst events): a batch ships on an
  // idle wire only batch_gap after the previous one, so at 200k events/s the broker gets about
  // 430 events per batch instead of 180: about a fifth less CPU per event in broker, agent and
  // subscriber for 0.7 ms more P95 (docs/performance.md, system/e2e round 8). Lighter traffic is
  // not held: below batch_burst events per round trip, a batch still ships as soon as
  // everything sent is acknowledged.
  size_t batch_burst = 64;
  std::chrono::nanoseconds batch_gap = std::chrono::milliseconds(2);
  Compression compression = Compression::kNone;
  std::filesystem::path spool_dir;              // empty: spool in memory
  uint64_t spool_max_bytes = 256ull << 20;
  uint64_t spool_segment_bytes = 4ull << 20;
  size_t max_in_flight = 64;                    // unacknowledged batches on the wire
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  std::chrono::milliseconds flush_timeout{10000};
  TlsFiles tls;
  std::string token_file;                       // bearer token, first line of the file (read again for each connection: tokens rotate)
  std::function<void(const PolicyUpdate&)> on_policy;  // called on the receiving thread
  // The broker's full policy set, sent when the stream opens: every policy in force, none
  // other (PolicyPush.full_set). Unset: each is passed to on_policy.
  std::function<void(const std::vector<PolicyUpdate>&)> on_policy_set;
  // The broker's packed HLC on each message, for the agent's clock to merge, so
  // events stamped after an ack are ordered after the broker's send.
  std::function<void(uint64_t)> on_broker_hlc;
};

struct ForwarderStats {
  uint64_t queued = 0;          // events in the open block, not yet in the spool
  uint64_t spooled_bytes = 0;   // batches stored and not yet acknowledged
  uint64_t spooled_batches = 0;
  uint64_t sent = 0;            // events written to a stream (replays count again)
  uint64_t acked = 0;           // events acknowledged by a broker
  uint64_t dropped_oldest = 0;  // events lost to a full spool or a failed spool write
  uint64_t unacked = 0;         // events in stored batches not yet acknowledged
  uint64_t corrupt_batches = 0; // spool records failing their checksum
  uint64_t unreadable_batches = 0;  // spooled batches that did not parse back, or that the
                                    // broker refused as malformed (Ack.refused): skipped
  uint64_t unreadable_events = 0;   // the events in them (lost)
  uint64_t forward_errors = 0;  // broken streams and failed connects
  uint64_t reconnects = 0;      // streams opened after the first
  bool connected = false;
  std::string broker;           // address of the current or last stream
  std::string spool_dir;        // empty: the spool is in memory
  // Set while every broker refuses this agent's credential (each one's last stream ended unauthenticated
  // or permission denied before an acknowledgement): the broker's reason and the code. Retrying
  // cannot help until the token or the broker's configuration changes.
  std::string refused;
};

// What a run's end leaves behind. pending: accepted, not acknowledged (queued or spooled);
// kept on disk when spool_dir is set, lost otherwise. lost: dropped or unreadable during the run.
struct Undelivered {
  uint64_t pending = 0;
  uint64_t lost = 0;
  std::string spool_dir;
  std::string refused;  // ForwarderStats::refused
  bool any() const { return pending || lost; }
  // One sentence for the operator, e.g. "120 events undelivered: 120 kept in the spool /x
  // (a later run with the same spool sends them)"; empty when everything was delivered.
  std::string describe() const;
};
Undelivered undelivered_of(const ForwarderStats& stats);

// Splits "a:1,b:2" into addresses; throws mcp::Error (usage) on an empty list.
std::vector<std::string> parse_broker_list(const std::string& text);

class Forwarder : public EventSink {
 public:
  // Validates options (usage error), opens the spool (runtime error) and starts its threads.
  explicit Forwarder(ForwarderOptions options);
  ~Forwarder() override;  // flushes (see drain), then stops
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  void consume(const Event& event) override;
  // The caller's burst is over (the runtime: after each ring poll). While everything sent is
  // acknowledged the open block is shipped now; otherwise it waits as above. Never blocks on
  // the network.
  void poll_done() override;
  // Queues interval counters; they travel in the next batch (one closes at once for them).
  void consume_counts(const std::vector<ProbeIntervalCounts>& counts) override;
  void flush() override;
  // Like flush() with an explicit limit; true when everything accepted is acknowledged.
  bool flush_for(std::chrono::milliseconds timeout);
  // Waits up to `limit` like flush_for, in short slices, and returns early (false) as soon as
  // give_up() is true: a second SIGINT ends the wait at once. After a drain or flush that did
  // not complete, the destructor does not wait again unless new events arrived.
  bool drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) override;

  ForwarderStats stats() const;
  // ForwarderStats::refused alone (cheap: the run loop asks after every poll).
  std::string refused() const;
  // The refusals in force now (replacing the last ones): sent on the stream when they change
  // and on every new stream, to brokers that take them (PolicyPush.accepts_policy_status).
  void set_policy_refusals(std::vector<PolicyRefusal> refusals);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Forwarder> make_forwarder(ForwarderOptions options);

}  // namespace mcp
