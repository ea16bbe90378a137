#include "broker/ingest/ingest.h"

#include <algorithm>
#include <vector>

#include "broker/ingest/downsample.h"
#include "broker/ingest/event_block.h"

namespace mcp::broker {

using grpc::Status;
using grpc::StatusCode;

Status to_status(const Verdict& v) {
  switch (v.code) {
    case Verdict::kOk: return Status::OK;
    case Verdict::kTooLarge: return Status(StatusCode::RESOURCE_EXHAUSTED, v.reason);
    case Verdict::kUnsupported: return Status(StatusCode::FAILED_PRECONDITION, v.reason);
    case Verdict::kInvalid: break;
  }
  return Status(StatusCode::INVALID_ARGUMENT, v.reason);
}

bool is_refusal(const Status& status) {
  switch (status.error_code()) {
    case StatusCode::INVALID_ARGUMENT:
    case StatusCode::RESOURCE_EXHAUSTED:
    case StatusCode::FAILED_PRECONDITION:
    case StatusCode::PERMISSION_DENIED:
    case StatusCode::UNAUTHENTICATED:
      return true;
    default:
      return false;
  }
}

Status decode_agent_message(grpc::ByteBuffer& buffer, const PublishLimits& limits,
                            mcp::v1::AgentMessage* msg, size_t* wire_bytes) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Status(StatusCode::INVALID_ARGUMENT, "unreadable message");
  std::string wire;
  wire.reserve(buffer.Length());
  for (const auto& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  buffer.Clear();
  *wire_bytes = wire.size();
  if (const Verdict v = scan_agent_message(wire, limits); !v.ok()) return to_status(v);
  if (!msg->ParseFromString(wire))
    return Status(StatusCode::INVALID_ARGUMENT, "not a valid AgentMessage (a string field that is not UTF-8?)");
  if (!msg->has_hello() && !msg->has_batch() && !msg->has_policy_status())
    return Status(StatusCode::INVALID_ARGUMENT, "AgentMessage with neither hello, batch nor policy_status");
  return Status::OK;
}

Status check_message(const std::string& agent_id, uint64_t incarnation, const mcp::v1::AgentMessage& msg,
                     const PublishLimits& limits) {
  if (msg.has_hello() && !msg.hello().agent_id().empty() && msg.hello().agent_id() != agent_id)
    return Status(StatusCode::INVALID_ARGUMENT, "a Publish stream carries one agent id");
  if (msg.has_hello() && msg.hello().incarnation() != incarnation)
    return Status(StatusCode::INVALID_ARGUMENT, "a Publish stream carries one incarnation");
  if (msg.has_hello()) return to_status(check_hello(msg.hello()));
  if (msg.has_batch()) return to_status(check_batch(msg.batch(), limits));
  if (msg.has_policy_status()) return check_policy_status(msg.policy_status());
  return Status::OK;
}

Status check_policy_status(const mcp::v1::PolicyStatus& s) {
  if (s.refusals_size() > 256) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: at most 256 refusals");
  for (const auto& r : s.refusals()) {
    if (r.refused_by_size() > 16) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: at most 16 probes per refusal");
    bool long_string = r.service().size() > 1024 || r.probe().size() > 1024 || r.trace_id_prefix().size() > 1024 ||
                       r.reason().size() > 1024;
    for (const auto& p : r.refused_by()) long_string |= p.size() > 1024;
    if (long_string) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: strings of at most 1024 bytes");
  }
  return Status::OK;
}

Status prepare_batch(const std::string& agent_id, uint64_t incarnation, const PublishLimits& limits,
                     mcp::v1::Batch* batch, PreparedBatch* out, uint64_t* newest_hlc) {
  const uint64_t seq = batch->sequence();
  auto packet = std::make_shared<mcp::v1::SamplePacket>();
  packet->set_agent_id(agent_id);
  packet->set_sequence(seq);
  packet->set_incarnation(incarnation);
  packet->mutable_counts()->Swap(batch->mutable_counts());
  uint64_t newest = 0;
  uint32_t index = 0;
  const BatchEventIds id_of(agent_id, seq, incarnation);
  if (!batch->events().empty()) {
    auto block = make_arena_block(batch->events().size());
    if (const Verdict v = parse_event_block(batch->events(), limits, block.get()); !v.ok()) return to_status(v);
    std::vector<uint64_t> ids(static_cast<size_t>(block->events_size()));  // 0: the agent's own
    for (auto& e : *block->mutable_events()) {
      if (e.event_id() == 0) e.set_event_id(ids[index] = id_of(index));
      ++index;
      newest = std::max<uint64_t>(newest, e.hlc());
    }
    // The bytes as received plus the ids (shared from here on); encoded afresh only if the
    // copy is refused, which a block that parsed should never be.
    if (!with_event_ids(batch->events(), ids, packet->mutable_events()))
      block->SerializeToString(packet->mutable_events());
    out->block = std::move(block);
  } else {
    packet->mutable_samples()->Swap(batch->mutable_samples());
    for (auto& s : *packet->mutable_samples()) {
      s.set_agent_id(agent_id);  // a sample cannot claim another agent
      if (s.event_id() == 0) s.set_event_id(id_of(index));
      ++index;
      newest = std::max<uint64_t>(newest, s.hlc());
    }
  }
  *newest_hlc = newest;
  out->packet = std::move(packet);
  return Status::OK;
}

}  // namespace mcp::broker
