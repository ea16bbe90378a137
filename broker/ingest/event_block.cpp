#include "broker/ingest/event_block.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <vector>

namespace mcp::broker {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using mcp::v1::EventBlock;

constexpr int kBlockEvents = 3;  // EventBlock.events

}  // namespace

std::shared_ptr<mcp::v1::EventBlock> make_arena_block(size_t wire_bytes) {
  google::protobuf::ArenaOptions options;
  // Parsed events take about three times their wire size; start there, grow in large blocks.
  options.start_block_size = std::clamp<size_t>(wire_bytes * 3, 4096, 1 << 20);
  options.max_block_size = 1 << 20;
  auto arena = std::make_shared<google::protobuf::Arena>(options);
  auto* block = google::protobuf::Arena::CreateMessage<mcp::v1::EventBlock>(arena.get());
  return std::shared_ptr<mcp::v1::EventBlock>(std::move(arena), block);  // shares the arena's life
}

Verdict scan_event_block(std::string_view bytes, uint32_t max_events, uint32_t* events) {
  *events = 0;
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kBlockEvents &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t size = 0;
      if (!in.ReadVarint32(&size) || !in.Skip(static_cast<int>(size)))
        return Verdict::invalid("malformed EventBlock");
      if (++*events > max_events)
        return Verdict::too_large("event block holds more than " + std::to_string(max_events) + " events");
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return Verdict::invalid("malformed EventBlock");
    }
  }
  if (!in.ConsumedEntireMessage()) return Verdict::invalid("malformed EventBlock");
  return {};
}

Verdict check_event_block(const EventBlock& block) {
  if (const auto bad = wire::check_block(block)) return Verdict::invalid(bad->reason);
  return {};
}

bool with_event_ids(std::string_view bytes, const std::vector<uint64_t>& ids, std::string* out) {
  using google::protobuf::io::CodedOutputStream;
  constexpr int kEventId = 24;  // CompactEvent.event_id
  constexpr uint32_t kEventIdTag = (kEventId << 3) | WireFormatLite::WIRETYPE_VARINT;
  constexpr uint32_t kEventsTag = (kBlockEvents << 3) | WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
  out->clear();
  out->reserve(bytes.size() + ids.size() * 16);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  CodedInputStream in(data, static_cast<int>(bytes.size()));
  size_t event = 0;
  uint8_t head[16];  // tag, length, up to 5 + 5 bytes
  uint8_t tail[16];  // event_id tag and value, up to 2 + 10 bytes
  for (;;) {
    const int start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;  // the end, or a malformed tag (ConsumedEntireMessage below)
    if (tag != kEventsTag) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      out->append(bytes.substr(static_cast<size_t>(start), static_cast<size_t>(in.CurrentPosition() - start)));
      continue;
    }
    uint32_t size = 0;
    if (!in.ReadVarint32(&size)) return false;
    const int body = in.CurrentPosition();
    if (!in.Skip(static_cast<int>(size)) || event >= ids.size()) return false;
    const uint64_t id = ids[event++];
    if (id == 0) {
      out->append(bytes.substr(static_cast<size_t>(start), static_cast<size_t>(body - start) + size));
      continue;
    }
    uint8_t* t = CodedOutputStream::WriteVarint32ToArray(kEventIdTag, tail);
    t = CodedOutputStream::WriteVarint64ToArray(id, t);
    const auto extra = static_cast<uint32_t>(t - tail);
    uint8_t* h = CodedOutputStream::WriteVarint32ToArray(kEventsTag, head);
    h = CodedOutputStream::WriteVarint32ToArray(size + extra, h);
    out->append(reinterpret_cast<const char*>(head), static_cast<size_t>(h - head));
    out->append(bytes.substr(static_cast<size_t>(body), size));
    out->append(reinterpret_cast<const char*>(tail), extra);
  }
  return in.ConsumedEntireMessage() && event == ids.size();
}

Filtered filter_block(const EventBlock& in, const SubscriptionFilter& f, EventBlock* out) {
  // Decided once per dictionary entry: which service strings and which tag sets pass.
  std::vector<uint8_t> service_ok;
  if (!f.service.empty()) {
    service_ok.resize(static_cast<size_t>(std::max(in.strings_size(), 1)));
    for (int i = 1; i < in.strings_size(); ++i) service_ok[i] = in.strings(i) == f.service;
  }
  std::vector<uint8_t> tags_ok;
  if (!f.tags.empty()) {
    tags_ok.resize(static_cast<size_t>(std::max(in.pair_sets_size(), 1)));
    for (int i = 1; i < in.pair_sets_size(); ++i) {
      const auto& set = in.pair_sets(i);
      bool all = true;
      for (const auto& [key, value] : f.tags) {
        bool found = false;
        for (int k = 0; k < set.keys_size() && !found; ++k)
          found = block_string(in, set.keys(k)) == key && block_string(in, set.values(k)) == value;
        if (!(all = found)) break;
      }
      tags_ok[i] = all;
    }
  }
  const double p_rate = realised_rate(f.rate);
  const auto passes = [&](const mcp::v1::CompactEvent& e) {
    return (service_ok.empty() || service_ok[e.service()]) && (tags_ok.empty() || tags_ok[e.tags()]) &&
           keep_at_rate(e.trace_id() != 0 ? e.trace_id() : e.event_id(), f.rate);
  };
  // Counting first is cheap next to copying: a subscriber of one service on a node whose
  // agents all label events with it is the common case, and gets the block as it is.
  if (p_rate >= 1.0) {
    const auto n = std::count_if(in.events().begin(), in.events().end(), passes);
    if (n == 0) return Filtered::kNone;
    if (n == in.events_size()) return Filtered::kAll;
  }
  out->Clear();
  for (const auto& e : in.events()) {
    if (!passes(e)) continue;
    auto* kept = out->add_events();
    *kept = e;
    if (p_rate < 1.0) {
      kept->set_threshold(rescale_threshold(e.threshold(), p_rate));
      kept->set_th(0);  // the broker's draw is not OTel's
    }
  }
  if (out->events_size() == 0) return Filtered::kNone;
  *out->mutable_strings() = in.strings();
  *out->mutable_pair_sets() = in.pair_sets();
  return Filtered::kSome;
}

}  // namespace mcp::broker
