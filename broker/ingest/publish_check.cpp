#include "broker/ingest/publish_check.h"

#include "broker/ingest/event_block.h"
#include "common/agent_id_rule.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

namespace mcp::broker {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kAgentMessageBatch = 2;  // AgentMessage.batch
constexpr int kBatchSamples = 2;       // Batch.samples

// Counts Batch.samples inside one length-delimited Batch; false when malformed.
bool count_samples(CodedInputStream* in, uint64_t* samples) {
  uint32_t length = 0;
  if (!in->ReadVarint32(&length)) return false;
  const auto limit = in->PushLimit(static_cast<int>(length));
  while (uint32_t tag = in->ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kBatchSamples &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t size = 0;
      if (!in->ReadVarint32(&size) || !in->Skip(static_cast<int>(size))) return false;
      ++*samples;
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return false;
    }
  }
  if (!in->ConsumedEntireMessage()) return false;
  in->PopLimit(limit);
  return true;
}

// Fields a newer agent added (a newer wire format): refused rather than silently dropped.
bool has_unknown_fields(const google::protobuf::Message& m) {
  return !m.GetReflection()->GetUnknownFields(m).empty();
}

}  // namespace

Verdict scan_agent_message(std::string_view wire, const PublishLimits& limits) {
  if (wire.size() > limits.max_message_bytes)
    return Verdict::too_large("message of " + std::to_string(wire.size()) + " bytes exceeds " +
                              std::to_string(limits.max_message_bytes));
  CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()), static_cast<int>(wire.size()));
  uint64_t samples = 0;
  while (uint32_t tag = in.ReadTag()) {
    bool ok = false;
    if (WireFormatLite::GetTagFieldNumber(tag) == kAgentMessageBatch &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED)
      ok = count_samples(&in, &samples);
    else
      ok = WireFormatLite::SkipField(&in, tag);
    if (!ok) return Verdict::invalid("malformed AgentMessage");
    if (samples > limits.max_batch_samples)
      return Verdict::too_large("batch holds more than " + std::to_string(limits.max_batch_samples) +
                                " samples");
  }
  if (!in.ConsumedEntireMessage()) return Verdict::invalid("malformed AgentMessage");
  return {};
}

Verdict check_agent_id(std::string_view agent_id) {
  if (agent_id.empty()) return Verdict::invalid("agent id missing (Hello.agent_id or x-mcp-agent-id)");
  if (const auto why = agent_id_problem(agent_id)) return Verdict::invalid(*why);
  return {};
}

Verdict check_hello(const mcp::v1::Hello& hello) {
  for (const auto& c : hello.capabilities())
    if (c != kCapabilityEventsV2 && c != kCapabilityRefusedAcks)
      return Verdict::unsupported("this broker does not speak the wire capability '" + c + "' (it speaks '" +
                                  std::string(kCapabilityEventsV2) + "' and '" +
                                  std::string(kCapabilityRefusedAcks) + "')");
  if (has_unknown_fields(hello))
    return Verdict::unsupported("Hello carries fields this broker does not know (a newer agent?)");
  return {};
}

Verdict parse_event_block(std::string_view bytes, const PublishLimits& limits,
                          mcp::v1::EventBlock* block) {
  uint32_t events = 0;
  if (Verdict v = scan_event_block(bytes, limits.max_batch_samples, &events); !v.ok()) return v;
  if (!block->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Verdict::invalid("Batch.events is not a valid EventBlock (a string that is not UTF-8?)");
  if (has_unknown_fields(*block))
    return Verdict::unsupported("EventBlock carries fields this broker does not know (a newer agent?)");
  return check_event_block(*block);
}

Verdict check_batch(const mcp::v1::Batch& batch, const PublishLimits& limits) {
  if (has_unknown_fields(batch))
    return Verdict::unsupported("Batch carries fields this broker does not know (a newer agent?)");
  if (batch.samples_size() > 0 && !batch.events().empty())
    return Verdict::invalid("a batch carries samples or events, not both");
  if (static_cast<uint64_t>(batch.samples_size()) > limits.max_batch_samples)
    return Verdict::too_large("batch holds more than " + std::to_string(limits.max_batch_samples) +
                              " samples");
  if (batch.sequence() == 0) return Verdict::invalid("batch sequence 0 (sequences start at 1)");
  for (int i = 0; i < batch.samples_size(); ++i)
    if (batch.samples(i).threshold() == 0)
      return Verdict::invalid("sample " + std::to_string(i) +
                              " has threshold 0 (probability 0, infinite weight)");
  return {};
}

}  // namespace mcp::broker
