// Broker: the mcp-broker gRPC server (service mcp.v1.Sampling) and its state.
//
// Publish: an agent's batches, v1 `samples` or a compact `events` block (capability "events-v2",
// ingest/event_block.h: parsed and checked once, event ids set once, stored as one encoded block), are
// deduplicated by (agent id, sequence), stored by the backend (store/backend.h), fanned out and
// acknowledged. Subscribers that set `compact` get blocks, others Samples (packet_forms.h); an
// unfiltered compact subscriber gets the same encoded packet as every other.
// Publish and Subscribe run on gRPC's callback API (no thread per stream): publish streams in
// publish_stream.h, subscriptions in subscription_stream.h (batched and lingering ones included).
// Subscribe: filter by service and tags, downsample by rate (see downsample.h); a subscriber
// resuming with resume_after = its last packet offset gets what it missed, then live packets,
// so a consumer that reconnects across a broker restart sees no gap or repeat.
// Policies are pushed to every connected agent on connect and on apply, and their removal
// (policy_store.h removal_of) when they are removed.
// Access (access.h): Publish needs the publish role, Subscribe the subscribe role, ApplyPolicy
// the policy role, Stats and ListPolicies any valid token; with TLS and a CA, clients must also
// present a certificate signed by it (mTLS). A broker on a non-loopback address with neither
// tokens nor a client CA refuses to start unless `insecure` is set.
// Publish checks (publish_check.h, dedup_table.h): a message over the size or sample bounds is
// refused with RESOURCE_EXHAUSTED before it is parsed, a malformed one (no agent id, bad fields,
// bytes that do not parse, a block index out of range) with INVALID_ARGUMENT, a capability or
// field this broker does not know with FAILED_PRECONDITION, an agent id bound to another
// credential with PERMISSION_DENIED, a sequence jump beyond the window with INVALID_ARGUMENT;
// nothing refused is stored, counted in Stats (except Stats.refused_publishes) or acked, and the
// stream ends with that status.
//
// Backends (store/backend.h): by default (options.nats.servers empty) the embedded backend keeps the
// journal (state_dir/journal, checksummed segments; memory when no state dir), dedup marks
// (state_dir/agents.json) and policies (state_dir/policies.json) in this process. With NATS
// servers set, the broker is a stateless front end over a JetStream cluster (jetstream_client.h):
// batches are acked once JetStream stored them (dedup by the JetStream message id), subscribers
// get what every broker published (offsets are stream sequences; a full subscriber queue holds
// the JetStream consumer back instead of dropping), and policies live in a key-value bucket
// watched by every broker. state_dir and journal_max_bytes do not apply there.
// OTLP (options.otlp.endpoint set, otlp/exporter.h): every newly stored batch (not a duplicate)
// is also offered to an OTLP exporter as spans, log records and estimated call/error metrics,
// host.name from the agent's hello. The exporter queues on its own thread and drops (counted)
// when full, so a collector that is down or slow never holds back ingest or subscribers.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broker/net/listener.h"
#include "broker/options.h"
#include "broker/policy/policy_key.h"
#include "mcp/v1/sampling.pb.h"
#include "otlp/exporter.h"

namespace mcp::broker {

class Broker {
 public:
  // Loads state and starts serving; throws mcp::Error (usage for bad options/files, runtime
  // when the address cannot be bound or state cannot be read).
  explicit Broker(BrokerOptions options);
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  int port() const;
  // What the Stats RPC answers (no access check): this broker's totals since it started.
  // Thread-safe; /metrics reads it at scrape time (broker_metrics.h).
  mcp::v1::StatsReply stats() const;
  // Stops accepting, ends subscriber streams, cancels what is still running after `grace`.
  void shutdown(std::chrono::milliseconds grace);
  // Not ok while new connections are refused or cannot be accepted (for /healthz). Thread-safe.
  ListenerHealth health() const;
  // The OTLP exporter's counters; nullopt when OTLP export is off.
  std::optional<otlp::ExporterStats> otlp_stats() const;
  // The policies, in process (the SamplingPolicy controller, policy_controller.h): the same
  // store, validation and pushes as the ApplyPolicy RPC, without an access check. Thread-safe.
  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed);
  bool remove_policy(const PolicyKey& key);
  std::vector<mcp::v1::Policy> policies() const;
  // What this broker's connected agents refused of the policies (AgentMessage.policy_status), by
  // policy key, one line per agent: "AGENT: PROBE[, PROBE] (REASON)". Thread-safe.
  std::map<PolicyKey, std::vector<std::string>> policy_refusals() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcp::broker
