// Broker: the mcp-broker gRPC server (service mcp.v1.Sampling) and its state.
//
// Publish: an agent's batches are deduplicated by (agent id, sequence), appended to the journal
// (state_dir/journal, checksummed segments; memory when no state dir), then fanned out to every
// subscriber's bounded queue and acknowledged. The dedup marks (state_dir/agents.json) are
// written after the journal append; on start the newest journal segment repairs marks a kill
// between the two left behind, so a replay after a restart is still delivered once.
// Subscribe: filter by service and tags, downsample by rate (see downsample.h); a subscriber
// resuming with resume_after = its last packet offset first gets the journal's later packets,
// then live ones, so a consumer that reconnects across a broker restart sees no gap or repeat.
// Policies (state_dir/policies.json) are pushed to every connected agent on connect and on apply.
// Access (access.h): Publish needs the publish role, Subscribe the subscribe role, ApplyPolicy
// the policy role, Stats and ListPolicies any valid token; with TLS and a CA, clients must also
// present a certificate signed by it (mTLS). A broker on a non-loopback address with neither
// tokens nor a client CA refuses to start unless `insecure` is set.
// Publish checks (publish_check.h, dedup_table.h): a message over the size or sample bounds is
// refused with RESOURCE_EXHAUSTED before it is parsed, a malformed one (no agent id, bad fields,
// bytes that do not parse) with INVALID_ARGUMENT, an agent id bound to another credential with
// PERMISSION_DENIED, a sequence jump beyond the window with INVALID_ARGUMENT; nothing refused is
// stored, counted in Stats or acked, and the stream ends with that status.
//
// Backends: by default (options.nats.servers empty) all of the above lives in this process
// (the embedded backend). With NATS servers set, the broker is a stateless front end over a
// JetStream cluster (nats_backend.h): batches are acked once JetStream stored them (dedup by the
// JetStream message id instead of the local marks), subscribers get what every broker published
// (offsets are stream sequences; a slow subscriber is slowed by flow control instead of losing
// its oldest packets, so queue_packets does not apply), and policies live in a key-value bucket
// watched by every broker. state_dir and journal_max_bytes do not apply there.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <vector>

#include "broker/access.h"
#include "broker/nats_options.h"
#include "broker/publish_check.h"

namespace mcp::broker {

struct BrokerOptions {
  std::string listen = "127.0.0.1:9090";  // port 0 picks a free port, see Broker::port()
  std::string tls_ca;                     // with tls_cert/tls_key: require client certificates
  std::string tls_cert;
  std::string tls_key;
  std::vector<TokenGrant> tokens;         // empty: no token authentication
  bool insecure = false;                  // allow a non-loopback listen without authentication
  PublishLimits limits;
  std::filesystem::path state_dir;        // empty: nothing survives a restart
  size_t subscriber_queue = 1024;         // packets per subscriber before its oldest are dropped
                                          // (a subscriber may ask for fewer)
  uint64_t journal_max_bytes = 256ull << 20;
  NatsBackendOptions nats;                // servers empty: the embedded backend
};

class Broker {
 public:
  // Loads state and starts serving; throws mcp::Error (usage for bad options/files, runtime
  // when the address cannot be bound or state cannot be read).
  explicit Broker(BrokerOptions options);
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  int port() const;
  // Stops accepting, ends subscriber streams, cancels what is still running after `grace`.
  void shutdown(std::chrono::milliseconds grace);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcp::broker
