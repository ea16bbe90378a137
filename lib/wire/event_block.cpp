#include "wire/event_block.h"

#include <algorithm>

#include "wire/block_check.h"

namespace mcp {

void EventBlockEncoder::reset() {
  dict_.reset();
  for (Memo* m : {&probe_, &comm_, &service_, &container_id_, &pod_uid_}) m->index = 0;
}

uint32_t EventBlockEncoder::intern(Memo& memo, std::string_view raw) {
  if (memo.index != 0 && raw == memo.raw) return memo.index;
  memo.index = dict_.string(raw);
  memo.raw.assign(raw);
  return memo.index;
}

uint32_t EventBlockEncoder::text(std::string_view raw, wire::Hot hot) {
  switch (hot) {
    case wire::Hot::kProbe: return intern(probe_, raw);
    case wire::Hot::kComm: return intern(comm_, raw);
    case wire::Hot::kService: return intern(service_, raw);
    case wire::Hot::kContainerId: return intern(container_id_, raw);
    case wire::Hot::kPodUid: return intern(pod_uid_, raw);
    case wire::Hot::kNone: break;
  }
  return dict_.string(raw);
}

void EventBlockEncoder::add(const Event& e) { wire::event_to_proto(e, *block_.add_events(), *this); }

void EventBlockEncoder::finish(std::string& out) {
  block_.AppendToString(&out);
  reset();
}

void EventBlockEncoder::finish(mcp::v1::EventBlock* out) {
  out->Swap(&block_);
  reset();
}

bool EventBlockDecoder::parse(std::string_view bytes, std::string& error) {
  pair_sets_.clear();
  auto fail = [&](std::string why) {
    block_.Clear();
    error = std::move(why);
    return false;
  };
  if (!block_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return fail("event block does not parse");
  if (const auto bad = wire::check_block(block_)) return fail(bad->reason);
  // Index 0 means no pairs even when the dictionary is empty.
  pair_sets_.resize(static_cast<size_t>(std::max(block_.pair_sets_size(), 1)));
  for (int s = 0; s < block_.pair_sets_size(); ++s) {
    const auto& set = block_.pair_sets(s);
    auto& out = pair_sets_[static_cast<size_t>(s)];
    out.reserve(static_cast<size_t>(set.keys_size()));
    for (int j = 0; j < set.keys_size(); ++j) out.emplace_back(text(set.keys(j)), text(set.values(j)));
  }
  return true;
}

const std::string& EventBlockDecoder::text(uint32_t index) const { return wire::block_string(block_, index); }

void EventBlockDecoder::get(size_t i, Event& out, uint64_t& event_id) const {
  const auto& e = block_.events(static_cast<int>(i));
  wire::event_from_proto(e, out, *this);
  event_id = e.event_id();
}

}  // namespace mcp
