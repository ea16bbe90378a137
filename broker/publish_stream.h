// PublishStream: one agent's Publish stream on gRPC's callback API, one path for every backend.
// Each batch is checked and prepared as it is read, then stored: inline by the embedded backend,
// or pipelined (JetStream: store_async), so an agent's in-flight window overlaps the replication
// round trips. Acks go back in sequence order as batches are stored. Reading pauses while more
// than limits.max_stream_bytes_in_flight of wire bytes wait to be stored or while
// kMaxQueuedReplies replies wait to be written (HTTP/2 flow control then holds the agent back).
// A refused message ends the stream with its status once the acks before it are written (an
// agent with the "refused-acks" capability gets a refused batch acked as refused instead, and
// the stream goes on); a batch the store will not take ends it at once (the agent replays from
// its last ack). Replies and policy pushes share one write queue, one write in flight. Owned by
// itself from start() to OnDone, and by whoever still holds it (a store callback, a policy
// push): those only touch gRPC while the stream is not finished.
// Everything the stream needs of the broker goes through PublishHost.
#pragma once
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "broker/store/backend.h"
#include "broker/policy/policy_fanout.h"
#include "broker/ingest/publish_check.h"
#include "otlp/mapping.h"

namespace mcp::broker {

class PublishStream;

class PublishHost {
 public:
  // Runs once, with whether the batch was a duplicate, or the status that ends the stream.
  using Stored = std::function<void(bool duplicate, const grpc::Status& status)>;

  virtual ~PublishHost() = default;
  virtual const PublishLimits& limits() const = 0;
  // The publish role; *credential: what the agent id is bound to (access.h).
  virtual grpc::Status authenticate(const grpc::ServerContextBase& ctx, std::string* credential) = 0;
  // May `credential` publish as `agent_id`? Called once, before join().
  virtual grpc::Status admit(const std::string& agent_id, const std::string& credential) = 0;
  // Joins the policy pushes; *full_set: every policy, to send before anything else. False when
  // the broker is stopping.
  virtual bool join(std::shared_ptr<PublishStream> stream, mcp::v1::BrokerMessage* full_set) = 0;
  virtual void leave(const PublishStream* stream) = 0;
  // Every message after decoding: checked, and a batch prepared (ingest.h).
  virtual grpc::Status take(const PublishStream* stream, const std::string& agent_id, uint64_t incarnation,
                            mcp::v1::AgentMessage& msg, PreparedBatch* prepared) = 0;
  // A malformed batch of an agent that takes refused acks: counted, logged, *ack filled.
  virtual void refuse_batch(const std::string& agent_id, uint64_t sequence, const grpc::Status& why,
                            mcp::v1::Ack* ack) = 0;
  virtual void store(const std::string& agent_id, const std::string& credential, const otlp::Origin& origin,
                     PreparedBatch& prepared, Stored done) = 0;
  virtual void count_refusal() = 0;  // a stream ended with is_refusal()
  virtual uint64_t hlc_now() = 0;    // the broker's clock, stamped on every reply
};

class PublishStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public PolicyPeer,
                            public std::enable_shared_from_this<PublishStream> {
 public:
  PublishStream(PublishHost* host, grpc::CallbackServerContext* ctx) : host_(host), ctx_(ctx) {}

  void start();
  bool send(const mcp::v1::BrokerMessage& msg) override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  static constexpr size_t kMaxQueuedReplies = 256;

  struct Entry {
    uint64_t sequence = 0;
    size_t bytes = 0;
    bool done = false;
    bool duplicate = false;
    std::string refused;  // why the batch was refused (Ack.refused)
  };

  void take(grpc::ByteBuffer& buffer);
  grpc::Status join(const mcp::v1::AgentMessage& msg);
  void stored(Entry& entry, bool duplicate, const grpc::Status& status);
  void release_acks_locked();
  void write_next_locked();
  void read_more_locked();
  void end_locked(grpc::Status status);
  void maybe_finish_locked();

  PublishHost* const host_;
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<PublishStream> self_;  // from start() to OnDone
  // Only the reading side (one read at a time) touches these, once joined read-only.
  std::string credential_;
  std::string agent_id_;
  uint64_t incarnation_ = 0;   // fixed by the first hello: sequences count within it
  bool refused_acks_ = false;  // a malformed batch is acked as refused, the stream goes on
  otlp::Origin origin_;
  grpc::ByteBuffer in_;

  std::mutex mu_;  // guards everything below
  std::deque<std::shared_ptr<Entry>> entries_;  // batches read, acked in this order
  uint64_t window_bytes_ = 0;                   // wire bytes of entries not yet acked
  std::deque<grpc::ByteBuffer> out_;            // replies and pushes waiting to be written
  grpc::ByteBuffer writing_;
  bool write_pending_ = false;
  bool read_pending_ = false;
  bool reading_ = true;   // the agent has not closed its side
  bool broken_ = false;   // cancelled, or a write failed
  bool store_failed_ = false;
  std::optional<grpc::Status> end_;  // the stream ends with this
  bool finished_ = false;
  grpc::Status final_;
};

}  // namespace mcp::broker
