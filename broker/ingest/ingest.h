// Ingest: what the broker does to each message of a Publish stream before the backend sees it.
// Pure functions over one message; no broker state, so each rule is testable on its own.
// - decode_agent_message: a message as read off the wire, bounded (scan_agent_message) before
//   it is parsed.
// - check_message: every message after the first: a hello may only repeat the stream's agent id
//   and incarnation; a batch must pass check_batch(); a policy_status is bounded.
// - prepare_batch: parses and checks Batch.events once (parse_event_block), sets every event id
//   (in the parsed block and, by with_event_ids, in its bytes: not re-encoded) and swaps the
//   batch's contents into a PreparedBatch. *newest_hlc: the batch's newest event stamp, for the
//   broker's clock to merge.
// Refusals are grpc::Status values for the client (to_status: Verdict -> code).
#pragma once
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "broker/ingest/publish_check.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

// A checked batch ready to store: header and counters, events as the encoded compact block
// (`block` kept parsed) or as v1 samples, agent and event ids set. broker_hlc is set by the
// front end; offset by the backend.
struct PreparedBatch {
  std::shared_ptr<mcp::v1::SamplePacket> packet;
  std::shared_ptr<const mcp::v1::EventBlock> block;  // null for a v1 batch
  uint32_t events() const {
    return block ? static_cast<uint32_t>(block->events_size())
                 : static_cast<uint32_t>(packet->samples_size());
  }
};


grpc::Status to_status(const Verdict& v);

// A refused Publish (bad or hostile input, a capability this broker lacks, a credential it does
// not take): counted in Stats.refused_publishes.
bool is_refusal(const grpc::Status& status);

grpc::Status decode_agent_message(grpc::ByteBuffer& buffer, const PublishLimits& limits,
                                  mcp::v1::AgentMessage* msg, size_t* wire_bytes);

grpc::Status check_message(const std::string& agent_id, uint64_t incarnation, const mcp::v1::AgentMessage& msg,
                           const PublishLimits& limits);

grpc::Status check_policy_status(const mcp::v1::PolicyStatus& status);

grpc::Status prepare_batch(const std::string& agent_id, uint64_t incarnation, const PublishLimits& limits,
                           mcp::v1::Batch* batch, PreparedBatch* out, uint64_t* newest_hlc);

}  // namespace mcp::broker
