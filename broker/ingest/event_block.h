// EventBlock (wire capability "events-v2", proto/mcp/v1/sampling.proto): what the broker does
// with a compact batch beyond the wire library (lib/wire: codec, dictionary, validator, kinds,
// v1 Sample conversions).
//
// - scan_event_block counts a serialized block's events before it is parsed, so a block is
//   bounded by PublishLimits::max_batch_samples as v1 samples are (parsing then allocates at
//   most that many events; the message size bounds the rest).
// - check_event_block: wire::check_block (wire/block_check.h) as a Verdict. After it passes,
//   nothing below reads out of range.
// - with_event_ids: the block's wire bytes with the broker's event ids added, copied instead of
//   re-encoded (ingest's encode of every CompactEvent was about a tenth of the broker's CPU).
// - filter_block: a subscriber's subset. Service and tags are decided once per dictionary entry
//   and pair set, not per event; the rate rescales kept thresholds as filter_packet does. When
//   every event passes unchanged it copies nothing: the caller shares the block it has.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "broker/ingest/downsample.h"
#include "broker/ingest/publish_check.h"
#include "mcp/v1/sampling.pb.h"
#include "wire/block_check.h"
#include "wire/samples.h"  // block_to_samples, samples_to_block: v1 subscribers and batches

namespace mcp::broker {

inline constexpr std::string_view kCapabilityEventsV2 = "events-v2";
inline constexpr std::string_view kCapabilityRefusedAcks = "refused-acks";  // Ack.refused

// An empty block on its own protobuf Arena, freed with the last reference: parsing a block of N
// events then costs a few arena blocks instead of N+ heap allocations. `wire_bytes` sizes them.
std::shared_ptr<mcp::v1::EventBlock> make_arena_block(size_t wire_bytes);

// *events = the block's event count; kTooLarge above max_events, kInvalid when malformed.
Verdict scan_event_block(std::string_view bytes, uint32_t max_events, uint32_t* events);
Verdict check_event_block(const mcp::v1::EventBlock& block);

using wire::block_string;  // index i of the block's strings; "" for 0

// Writes to *out the wire bytes of a block that parse_event_block accepted, with
// `event_id = ids[i]` appended to event i wherever ids[i] != 0. Protobuf keeps the last value of
// a scalar field, so *out parses as `bytes` with those ids set; the rest is copied byte for byte.
// False (and *out unusable) unless `bytes` holds exactly ids.size() events in well-formed
// top-level fields; the caller then serializes its parsed block instead.
bool with_event_ids(std::string_view bytes, const std::vector<uint64_t>& ids, std::string* out);

enum class Filtered {
  kNone,  // no event passes
  kSome,  // *out holds those that pass (the dictionaries copied whole)
  kAll,   // every event passes unchanged (never with a rate below 1): *out untouched, share `in`
};
Filtered filter_block(const mcp::v1::EventBlock& in, const SubscriptionFilter& filter,
                      mcp::v1::EventBlock* out);

}  // namespace mcp::broker
