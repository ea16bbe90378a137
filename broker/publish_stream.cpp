#include "broker/publish_stream.h"

#include <spdlog/spdlog.h>

#include "broker/ingest/event_block.h"
#include "broker/ingest/ingest.h"

namespace mcp::broker {

using grpc::Status;
using grpc::StatusCode;

namespace {

// Publish is served over raw bytes so a message is bounded before it is parsed; replies are
// serialised here.
grpc::ByteBuffer to_buffer(const mcp::v1::BrokerMessage& msg) {
  grpc::Slice slice(msg.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

void PublishStream::start() {
  self_ = shared_from_this();
  std::lock_guard lock(mu_);
  if (Status st = host_->authenticate(*ctx_, &credential_); !st.ok()) {
    end_locked(st);
    return;
  }
  read_more_locked();
}

bool PublishStream::send(const mcp::v1::BrokerMessage& msg) {
  std::lock_guard lock(mu_);
  if (finished_ || end_) return false;
  out_.push_back(to_buffer(msg));
  write_next_locked();
  return true;
}

// read_pending_ stays set until the message is dealt with: only then may another read start
// (from here or from a completed store), so batches are stored in the order they came.
void PublishStream::OnReadDone(bool ok) {
  if (!ok) {
    std::lock_guard lock(mu_);
    read_pending_ = false;
    reading_ = false;
    if (agent_id_.empty() && !end_)
      end_locked(Status(StatusCode::INVALID_ARGUMENT, "Publish stream ended before a hello or a batch"));
    maybe_finish_locked();
    return;
  }
  take(in_);
  std::lock_guard lock(mu_);
  read_pending_ = false;
  read_more_locked();
}

void PublishStream::OnWriteDone(bool ok) {
  std::lock_guard lock(mu_);
  write_pending_ = false;
  if (!ok) {
    broken_ = true;  // the agent is gone
  } else {
    write_next_locked();
    read_more_locked();
  }
  maybe_finish_locked();
}

void PublishStream::OnCancel() {
  std::lock_guard lock(mu_);
  broken_ = true;
  maybe_finish_locked();
}

void PublishStream::OnDone() {
  host_->leave(this);
  if (final_.ok())
    spdlog::info("agent {} disconnected", agent_id_.empty() ? "(none)" : agent_id_);
  else
    spdlog::warn("agent {} from {} refused: {}", agent_id_.empty() ? "(none)" : agent_id_, ctx_->peer(),
                 final_.error_message());
  const auto last = std::move(self_);  // may be the last reference: nothing after this
}

void PublishStream::take(grpc::ByteBuffer& buffer) {
  mcp::v1::AgentMessage msg;
  size_t wire_bytes = 0;
  Status status = decode_agent_message(buffer, host_->limits(), &msg, &wire_bytes);
  if (status.ok() && agent_id_.empty()) status = join(msg);
  PreparedBatch prepared;
  if (status.ok()) status = host_->take(this, agent_id_, incarnation_, msg, &prepared);
  if (!status.ok() && refused_acks_ && msg.has_batch()) {
    // Acked as refused in order with the batches around it; the stream goes on.
    mcp::v1::Ack ack;
    host_->refuse_batch(agent_id_, msg.batch().sequence(), status, &ack);
    auto entry = std::make_shared<Entry>();
    entry->sequence = ack.sequence();
    entry->refused = ack.reason();
    entry->done = true;
    std::lock_guard lock(mu_);
    entries_.push_back(std::move(entry));
    release_acks_locked();
    return;
  }
  if (!status.ok()) {
    std::lock_guard lock(mu_);
    end_locked(status);
    return;
  }
  if (!msg.has_batch()) return;
  auto entry = std::make_shared<Entry>();
  entry->sequence = msg.batch().sequence();
  entry->bytes = wire_bytes;
  {
    std::lock_guard lock(mu_);
    entries_.push_back(entry);
    window_bytes_ += wire_bytes;
  }
  // Not under mu_: a store may complete on this thread.
  host_->store(agent_id_, credential_, origin_, prepared,
               [self = shared_from_this(), entry](bool duplicate, const Status& st) {
                 self->stored(*entry, duplicate, st);
               });
}

// The first message names the agent: checked, admitted, joined to the broker's agents (policy
// pushes), and sent the full policy set before anything else.
Status PublishStream::join(const mcp::v1::AgentMessage& msg) {
  if (msg.has_hello()) {
    agent_id_ = msg.hello().agent_id();
    origin_.host_name = msg.hello().hostname();
    incarnation_ = msg.hello().incarnation();
    for (const auto& c : msg.hello().capabilities()) refused_acks_ |= c == kCapabilityRefusedAcks;
  }
  if (agent_id_.empty()) {
    const auto it = ctx_->client_metadata().find("x-mcp-agent-id");
    if (it != ctx_->client_metadata().end()) agent_id_.assign(it->second.data(), it->second.size());
  }
  if (const Verdict v = check_agent_id(agent_id_); !v.ok()) {
    agent_id_.clear();
    return to_status(v);
  }
  if (Status admitted = host_->admit(agent_id_, credential_); !admitted.ok()) return admitted;
  origin_.agent_id = agent_id_;
  // The full set goes first: a push for this agent waits on mu_, and the set is read after the
  // agent joined, so a policy stored meanwhile is in the set, pushed after it, or both (pushes
  // are idempotent); never lost behind a set that lacks it.
  std::lock_guard lock(mu_);
  mcp::v1::BrokerMessage full_set;
  if (!host_->join(shared_from_this(), &full_set)) return Status(StatusCode::UNAVAILABLE, "broker stopping");
  out_.push_back(to_buffer(full_set));
  write_next_locked();
  spdlog::info("agent {} connected from {}", agent_id_, ctx_->peer());
  return Status::OK;
}

void PublishStream::stored(Entry& entry, bool duplicate, const Status& status) {
  std::lock_guard lock(mu_);
  entry.done = true;
  entry.duplicate = duplicate;
  if (!status.ok()) {
    store_failed_ = true;
    end_locked(status);
  }
  release_acks_locked();
  read_more_locked();
}

// Acks for the stored batches at the head of the window, in order.
void PublishStream::release_acks_locked() {
  while (!store_failed_ && !entries_.empty() && entries_.front()->done) {
    const Entry& e = *entries_.front();
    mcp::v1::BrokerMessage reply;
    reply.set_broker_hlc(host_->hlc_now());
    reply.mutable_ack()->set_sequence(e.sequence);
    reply.mutable_ack()->set_duplicate(e.duplicate);
    if (!e.refused.empty()) {
      reply.mutable_ack()->set_refused(true);
      reply.mutable_ack()->set_reason(e.refused);
    }
    out_.push_back(to_buffer(reply));
    window_bytes_ -= e.bytes;
    entries_.pop_front();
  }
  write_next_locked();
  maybe_finish_locked();
}

void PublishStream::write_next_locked() {
  if (write_pending_ || out_.empty() || finished_ || broken_) return;
  writing_ = std::move(out_.front());
  out_.pop_front();
  write_pending_ = true;
  StartWrite(&writing_);
}

void PublishStream::read_more_locked() {
  if (read_pending_ || !reading_ || end_ || finished_ || broken_) return;
  if (window_bytes_ > host_->limits().max_stream_bytes_in_flight) return;
  if (out_.size() >= kMaxQueuedReplies) return;
  read_pending_ = true;
  StartRead(&in_);
}

void PublishStream::end_locked(Status status) {
  if (!end_) end_ = std::move(status);
  maybe_finish_locked();
}

// Finishes once nothing is left to do: at once (no write in flight) when the agent is gone or
// the store failed; after the last ack otherwise.
void PublishStream::maybe_finish_locked() {
  if (finished_ || write_pending_) return;
  const bool abrupt = broken_ || store_failed_;
  if (!abrupt) {
    if (!end_ && reading_) return;
    if (!entries_.empty() || !out_.empty()) return;
  }
  finished_ = true;
  final_ = end_ ? *end_ : Status::OK;
  if (is_refusal(final_)) host_->count_refusal();
  Finish(final_);
}

}  // namespace mcp::broker
