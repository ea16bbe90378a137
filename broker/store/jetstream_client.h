// JetStreamClient: the NATS client under the JetStream backend (jetstream_backend.cpp, which is
// the Backend of backend.h): the broker's state on a NATS JetStream cluster instead of in the
// process, so any number of brokers are stateless front ends over one replicated stream and one
// policy bucket. It speaks NATS only; the Backend contract (admission, sequence windows,
// subscriber queues) is the backend's.
//
// publish(): the packet's samples (or, for a compact batch, the events of its EventBlock, each
// group a block of its own with the batch's dictionaries) are grouped by service, each group
// (split further when it would exceed the server's max payload) is one message on "mcp.samples.<token>" (nats_naming.h) with
// Nats-Msg-Id "<agent>|<sequence>|<part>". Each message is published synchronously and retried
// with the same id until JetStream acks it or publish_timeout passes, so a batch returns only
// once it is stored on a quorum of replicas, and a replay (same agent, same sequence, through any
// broker, within duplicate_window) is acked by JetStream as a duplicate and not stored again.
// publish_async() sends the same messages with js_PublishMsgAsync, so one agent's batches overlap
// their replication round trips; a failed one is resent with the same id, until publish_timeout,
// by a resend thread of this client's: nothing waits or blocks on the library's ack thread.
// subscribe(): an ordered ephemeral push consumer filtered by the service's subject, delivering
// new messages (or from stream sequence resume_after + 1); a packet's offset is its stream
// sequence, which is the same through every broker, so a consumer may resume on another broker.
// The consumer recreates itself after a missed heartbeat or a server change, from the last
// sequence it delivered. Tags and sampling_rate are applied by the caller (downsample.h).
// Policies: a key-value bucket (one key per (service, probe), history 1) that every broker
// watches; each change is handed to `on_policy` (the broker pushes it to its own agents).
// Everything here is thread-safe. Errors are mcp::Error: usage for bad options, runtime when the
// cluster cannot be reached or does not ack in time.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broker/store/nats_options.h"
#include "broker/policy/policy_key.h"
#include "clock/clock_source.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

struct PublishOutcome {
  bool duplicate = false;  // every message of the batch was already in the stream
  uint32_t messages = 0;
};

class JetStreamClient {
 public:
  // Called on the watcher thread for every policy in the bucket (initial ones included) and,
  // with removal_of(), for every deleted one; returns how many agents it was pushed to.
  using PolicyListener = std::function<uint32_t(const mcp::v1::Policy&)>;

  // Connects, creates or updates the stream and the bucket, and loads the current policies.
  // `clock` stamps applied policies (its realtime); null: the system's.
  JetStreamClient(NatsBackendOptions options, PolicyListener on_policy,
                  std::shared_ptr<clock::ClockSource> clock = nullptr);
  ~JetStreamClient();
  JetStreamClient(const JetStreamClient&) = delete;
  JetStreamClient& operator=(const JetStreamClient&) = delete;

  // `block`: the parsed events of a compact packet (packet.events), nullptr for a v1 packet.
  PublishOutcome publish(const mcp::v1::SamplePacket& packet, const mcp::v1::EventBlock* block);

  // The same without waiting: `done` runs once, on the NATS ack thread or the resend thread,
  // when every message of the batch is acked (error empty) or one could not be stored by
  // publish_timeout or before the client closed (error set).
  // Calls in one order are stored in that order unless a retry intervenes. Blocks only while
  // the connection already has the maximum of unacknowledged publishes (back pressure).
  using PublishDone = std::function<void(const PublishOutcome&, const std::string& error)>;
  void publish_async(const mcp::v1::SamplePacket& packet, const mcp::v1::EventBlock* block,
                     PublishDone done);

  class Feed {
   public:
    virtual ~Feed() = default;
    // The next message as a packet (offset = stream sequence; samples, or events for a compact
    // batch), or nullptr after `timeout`;
    // throws mcp::Error (runtime) once the consumer is lost for good.
    virtual std::unique_ptr<mcp::v1::SamplePacket> next(std::chrono::milliseconds timeout) = 0;
  };
  // service empty: every service. resume_after 0: only messages published from now on.
  std::unique_ptr<Feed> subscribe(const std::string& service, uint64_t resume_after);

  // Binds `agent_id` to `credential` in the agent bucket when it is unbound (or refreshes the
  // binding); returns the credential it is bound to when that is another one, else nullopt.
  // Throws mcp::Error (runtime) when the bucket cannot be read or written.
  std::optional<std::string> bind_agent(const std::string& agent_id, const std::string& credential);

  // The sequence mark of (agent, incarnation) that some broker of the cluster last wrote to the
  // agent bucket, 0 when none; store_mark() writes one. Throw mcp::Error (runtime) when the
  // bucket cannot be read or written.
  uint64_t load_mark(const std::string& agent_id, uint64_t incarnation);
  void store_mark(const std::string& agent_id, uint64_t incarnation, uint64_t mark);

  // Validates and stamps (mcp::Error usage on a bad policy), stores it in the bucket, and waits
  // (up to 5 s) until this broker's watcher has seen it; *pushed = agents of this broker told.
  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed);
  std::vector<mcp::v1::Policy> policies() const;
  // Deletes the key; every broker's watcher drops the policy. False when it was not there.
  bool remove_policy(const PolicyKey& key);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcp::broker
