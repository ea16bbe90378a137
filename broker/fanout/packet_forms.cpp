#include "broker/fanout/packet_forms.h"

#include "broker/ingest/event_block.h"

namespace mcp::broker {

PacketForms::PacketForms(PacketPtr stored, std::shared_ptr<const mcp::v1::EventBlock> block)
    : stored_(std::move(stored)), block_(std::move(block)) {
  if (compact_stored())
    compact_ = stored_;
  else
    v1_ = stored_;
}

void PacketForms::copy_header(mcp::v1::SamplePacket* out) const {
  out->set_agent_id(stored_->agent_id());
  out->set_sequence(stored_->sequence());
  out->set_offset(stored_->offset());
  out->set_broker_hlc(stored_->broker_hlc());
  *out->mutable_counts() = stored_->counts();
}

uint64_t PacketForms::events() {
  return compact_stored() ? static_cast<uint64_t>(block().events_size())
                          : static_cast<uint64_t>(stored_->samples_size());
}

const mcp::v1::EventBlock& PacketForms::block() {
  if (!block_) {
    auto block = make_arena_block(stored_->events().size());
    if (compact_stored()) {
      // Checked at ingest; a block that no longer parses or checks (a damaged record) is empty.
      if (!block->ParseFromString(stored_->events()) || !check_event_block(*block).ok()) block->Clear();
    } else {
      samples_to_block(stored_->samples(), block.get());
    }
    block_ = std::move(block);
  }
  return *block_;
}

const PacketPtr& PacketForms::v1() {
  if (!v1_) {
    auto packet = std::make_shared<mcp::v1::SamplePacket>();
    copy_header(packet.get());
    block_to_samples(block(), stored_->agent_id(), packet->mutable_samples());
    v1_ = std::move(packet);
  }
  return v1_;
}

const PacketPtr& PacketForms::compact() {
  if (!compact_) {
    auto packet = std::make_shared<mcp::v1::SamplePacket>();
    copy_header(packet.get());
    block().SerializeToString(packet->mutable_events());
    compact_ = std::move(packet);
  }
  return compact_;
}

PacketPtr PacketForms::for_subscriber(const SubscriptionFilter& filter, bool compact,
                                      uint64_t* events) {
  uint64_t unused = 0;
  if (events == nullptr) events = &unused;
  if (filter.passes_everything()) {
    *events = this->events();
    return compact ? this->compact() : v1();  // even without events: it carries the counts
  }
  auto out = std::make_shared<mcp::v1::SamplePacket>();
  if (!compact) {
    if (!filter_packet(*v1(), filter, out.get())) return nullptr;
    *events = static_cast<uint64_t>(out->samples_size());
    return out;
  }
  mcp::v1::EventBlock subset;
  switch (filter_block(block(), filter, &subset)) {
    case Filtered::kNone:
      return nullptr;
    case Filtered::kAll:
      *events = this->events();
      return this->compact();
    case Filtered::kSome:
      break;
  }
  *events = static_cast<uint64_t>(subset.events_size());
  copy_header(out.get());
  subset.SerializeToString(out->mutable_events());
  return out;
}

}  // namespace mcp::broker
