// PacketForms: one stored batch in the forms subscribers ask for, each built at most once.
//
// A batch is stored as it arrived: v1 `samples`, or a compact `events` block (EventBlock bytes
// with event ids set). A v1 subscriber gets samples (converted from the block when needed), a
// compact one the block (encoded from samples when needed). A subscriber whose filter keeps
// everything gets the shared packet, so every such compact subscriber is handed the very same
// encoded bytes; a filtering one gets its own subset. Not thread-safe: one per fan-out or per
// subscriber reading the journal or JetStream.
#pragma once
#include <cstdint>
#include <memory>

#include "broker/ingest/downsample.h"
#include "broker/fanout/subscriber_queue.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

class PacketForms {
 public:
  // `stored`: header (agent id, sequence, offset, hlc, counts) and samples or events. `block`:
  // the parsed events when the caller has them already (ingest), else parsed on first need.
  // A stored block must have passed check_event_block (ingest) before.
  explicit PacketForms(PacketPtr stored, std::shared_ptr<const mcp::v1::EventBlock> block = nullptr);

  bool compact_stored() const { return !stored_->events().empty(); }
  uint64_t events();
  const PacketPtr& v1();       // samples form
  const PacketPtr& compact();  // events form
  const mcp::v1::EventBlock& block();

  // What a subscriber with this filter gets; nullptr when nothing passes. *events: how many
  // events the packet holds (for drop counts).
  PacketPtr for_subscriber(const SubscriptionFilter& filter, bool compact, uint64_t* events = nullptr);

 private:
  void copy_header(mcp::v1::SamplePacket* out) const;

  PacketPtr stored_;
  PacketPtr v1_;
  PacketPtr compact_;
  std::shared_ptr<const mcp::v1::EventBlock> block_;
};

}  // namespace mcp::broker
