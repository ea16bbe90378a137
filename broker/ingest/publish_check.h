// Publish checks: what the broker accepts from an agent before anything is stored or acked.
//
// Bounds (documented in the README, "Broker limits"):
// - a message is at most PublishLimits::max_message_bytes on the wire (also gRPC's receive limit);
// - a batch holds at most max_batch_samples samples, counted on the wire BEFORE the message is
//   parsed, so a message of millions of empty samples costs a scan, not a parse (the parse of a
//   5 MB message of 2-byte samples used to cost ~600 MB);
// - every sample's threshold is non-zero (its weight 2^64 / threshold would be infinite);
// - the batch sequence is non-zero (0 is below every dedup mark: it would be acked unstored);
// - an agent id is 1..256 printable ASCII characters other than '|' (it names NATS message ids
//   and is copied into every sample's proto3 string).
// - a batch carries `samples` (v1) or `events` (a compact EventBlock, capability "events-v2"),
//   never both; the block is bounded, parsed and checked once by parse_event_block (event_block.h);
// - a hello naming a capability this broker does not speak, or a batch with fields it does not
//   know (a newer wire format), is refused with FAILED_PRECONDITION naming it, not half-read.
// Each check answers a Verdict: kOk, kInvalid (INVALID_ARGUMENT), kTooLarge
// (RESOURCE_EXHAUSTED) or kUnsupported (FAILED_PRECONDITION), with a reason for the client.
// Pure functions: no I/O, no locks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

struct PublishLimits {
  uint32_t max_batch_samples = 10000;              // the agent sends at most 512
  uint32_t max_message_bytes = 4u << 20;           // decompressed, per AgentMessage
  uint64_t max_stream_bytes_in_flight = 16u << 20; // stored-but-unacked bytes per Publish stream
};

struct Verdict {
  enum Code { kOk, kInvalid, kTooLarge, kUnsupported } code = kOk;
  std::string reason;
  bool ok() const { return code == kOk; }
  static Verdict invalid(std::string r) { return {kInvalid, std::move(r)}; }
  static Verdict too_large(std::string r) { return {kTooLarge, std::move(r)}; }
  static Verdict unsupported(std::string r) { return {kUnsupported, std::move(r)}; }
};

// Counts the samples of the AgentMessage's batch without parsing them and checks the size and
// sample bounds; kInvalid when the bytes are not a well-formed protobuf message.
Verdict scan_agent_message(std::string_view wire, const PublishLimits& limits);

Verdict check_agent_id(std::string_view agent_id);
Verdict check_hello(const mcp::v1::Hello& hello);

// Fields of a parsed batch (sequence, thresholds, sample count, samples xor events, no
// unknown fields). The events block itself: parse_event_block.
Verdict check_batch(const mcp::v1::Batch& batch, const PublishLimits& limits);

// Batch.events: bounded by max_batch_samples before parsing (scan_event_block), parsed into
// *block, then check_event_block.
Verdict parse_event_block(std::string_view bytes, const PublishLimits& limits,
                          mcp::v1::EventBlock* block);

}  // namespace mcp::broker
