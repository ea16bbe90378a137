// The v1 wire form of events (proto `Sample`: strings and pair maps inline), kept for v1
// subscribers (SubscriptionRequest.compact unset) and v1 batches (Batch.samples); see the
// proto for how long. Every conversion goes through the one field list of wire/event_fields.h
// (Event <-> either message) or, between the two messages, the one in samples.cpp.
#pragma once
#include <string>

#include "common/event.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp {

// A v1 Sample into `out` (reused like EventBlockDecoder::get); strings view into `sample`.
void from_sample(const mcp::v1::Sample& sample, Event& out);
// An Event as a v1 Sample (strings repaired to valid UTF-8). Tests and benches use it to stand
// in for v1 publishers and subscribers.
void to_sample(const Event& event, mcp::v1::Sample* sample);

// Appends one Sample per event of a checked block (agent_id set on each).
void block_to_samples(const mcp::v1::EventBlock& block, const std::string& agent_id,
                      google::protobuf::RepeatedPtrField<mcp::v1::Sample>* out);
// The samples as one block (dictionaries built by wire::Dictionary; agent_id is not carried).
void samples_to_block(const google::protobuf::RepeatedPtrField<mcp::v1::Sample>& samples,
                      mcp::v1::EventBlock* out);

}  // namespace mcp
