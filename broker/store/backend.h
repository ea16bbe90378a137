// Backend: where the broker keeps batches and policies, behind one interface so the front end
// (broker.cpp and its parts: access, ingest, stats, the streams) never asks which one runs.
// - embedded (make_embedded_backend): this process: the journal (state_dir/journal, or memory),
//   dedup marks (state_dir/agents.json), bounded subscriber queues fed at store time, the
//   policies file. Only this backend builds or scans a journal.
// - JetStream (make_jetstream_backend, over the NATS client of jetstream_client.h): a stateless
//   front end over a stream and a key-value bucket shared by every broker; stores are pipelined
//   (store_async).
// Every method is thread-safe. Refusals are grpc::Status values for the client; an unreachable
// store throws mcp::Error (the front end answers INTERNAL / UNAVAILABLE).
#pragma once
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "broker/ingest/ingest.h"  // PreparedBatch
#include "broker/policy/policy_key.h"
#include "broker/fanout/subscriber_queue.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp::broker {

struct BrokerOptions;

class Backend {
 public:
  // Pushes a stored or changed policy, or a removal (removal_of), to this broker's agents;
  // returns how many were told.
  using PolicyListener = std::function<uint32_t(const mcp::v1::Policy&)>;
  using StoreDone = std::function<void(bool duplicate, const std::string& error)>;

  virtual ~Backend() = default;

  // Once per Publish stream, before its first batch: may `credential` publish as `agent_id`?
  // (The embedded backend decides per batch, in store(), against its marks and bindings.)
  virtual grpc::Status admit(const std::string& /*agent_id*/, const std::string& /*credential*/) {
    return grpc::Status::OK;
  }

  // Before a batch of `agent_id` is stored (and before store_async): refuses a sequence that
  // starts or jumps too far (dedup_table.h's window), INVALID_ARGUMENT. The embedded backend
  // decides in store() instead.
  virtual grpc::Status check_sequence(const std::string& /*agent_id*/, uint64_t /*incarnation*/,
                                      uint64_t /*sequence*/) {
    return grpc::Status::OK;
  }

  // Stores one batch, returning once it is durable. OK with *duplicate for a replay (acked, not
  // stored again); otherwise the refusal for the client (nothing stored). `on_stored` runs once
  // for a new batch, after it is stored and before this broker's subscribers can see it (the
  // front end counts it there, so Stats never lags what a subscriber received); it may not call
  // back into the backend.
  virtual grpc::Status store(const std::string& agent_id, const std::string& credential,
                             PreparedBatch& batch, bool* duplicate,
                             const std::function<void()>& on_stored) = 0;
  // True when store_async may be used: batches overlap their round trips to the store.
  virtual bool pipelined() const { return false; }
  // `done` runs once, on a backend thread, when the batch is stored (error empty) or not.
  virtual void store_async(PreparedBatch& batch, StoreDone done);

  // One subscription's feed: the backend pushes its packets into the queue it was given (the
  // front end's reactor writes them out) until this is destroyed, which returns once nothing
  // pushes to that queue any more.
  class Subscription {
   public:
    virtual ~Subscription() = default;
    // Packets that come before the live ones (a resumed subscription's journal replay), a chunk
    // per call, in order; empty once caught up. Called on the writer's thread, never twice at
    // once; the writer stops calling after the first empty chunk.
    virtual std::vector<std::shared_ptr<const mcp::v1::SamplePacket>> backlog() { return {}; }
  };
  using Metadata = std::vector<std::pair<std::string, std::string>>;
  // Starts one subscription (request already checked) feeding `queue`; *metadata: initial
  // metadata for the client. A refusal (broker stopping, store unreachable) is the status.
  virtual grpc::Status subscribe(const mcp::v1::SubscriptionRequest& req, const std::string& peer,
                                 std::shared_ptr<SubscriberQueue> queue, Metadata* metadata,
                                 std::unique_ptr<Subscription>* out) = 0;

  // Validates, stamps and stores; mcp::Error usage for a bad policy. *pushed: agents told.
  virtual mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) = 0;
  virtual std::vector<mcp::v1::Policy> policies() const = 0;
  // Removes the policy of `key` (from every broker, with JetStream) and pushes the
  // removal to the agents (of every broker); false when there was none.
  virtual bool remove_policy(const PolicyKey& key) = 0;

  // Closes every subscription's queue (the broker is stopping).
  virtual void stop() = 0;
};

// Both read time only from options.clock (null: the system's): the dedup marks' now, agent
// expiry and policy stamps (its realtime).
std::unique_ptr<Backend> make_embedded_backend(const BrokerOptions& options,
                                               Backend::PolicyListener push);
std::unique_ptr<Backend> make_jetstream_backend(const BrokerOptions& options,
                                                Backend::PolicyListener push);

}  // namespace mcp::broker
