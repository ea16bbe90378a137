#include "forward/event_block.h"

#include <algorithm>
#include <cstring>

#include "common/utf8.h"
#include "forward/event_fields.h"

namespace mcp {
namespace {

// v1 Samples hold their strings; repaired as in the compact dictionary, since one invalid byte in
// a proto3 string makes the whole message unparseable.
struct InlineEncode {
  std::string text(std::string_view raw, wire::Hot) const { return valid_utf8(raw); }
};

struct InlineDecode {
  const std::string& text(const std::string& s) const { return s; }
  template <class Map>
  const Map& pairs(const Map& m) const { return m; }
};

}  // namespace

EventBlockEncoder::EventBlockEncoder() { reset(); }

void EventBlockEncoder::reset() {
  block_.Clear();
  strings_.clear();
  pair_sets_.clear();
  block_.add_strings();    // 0: ""
  block_.add_pair_sets();  // 0: no pairs
  strings_.emplace(std::string(), 0);
  for (Memo* m : {&probe_, &comm_, &service_, &container_id_, &pod_uid_}) m->index = 0;
}

uint32_t EventBlockEncoder::intern(Memo& memo, std::string_view raw) {
  if (memo.index != 0 && raw == memo.raw) return memo.index;
  memo.index = intern(raw);
  memo.raw.assign(raw);
  return memo.index;
}

uint32_t EventBlockEncoder::intern(std::string_view raw) {
  if (raw.empty()) return 0;
  if (auto it = strings_.find(raw); it != strings_.end()) return it->second;
  const auto index = static_cast<uint32_t>(block_.strings_size());
  std::string* s = block_.add_strings();
  // Repaired once per distinct string per block, not per event.
  if (is_valid_utf8(raw)) s->assign(raw);
  else append_valid_utf8(*s, raw);
  strings_.emplace(std::string(raw), index);
  return index;
}

uint32_t EventBlockEncoder::intern_pairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
  if (pairs.empty()) return 0;
  scratch_.clear();
  for (const auto& [k, v] : pairs) {
    const uint32_t ki = intern(k);
    const uint32_t vi = intern(v);
    scratch_.push_back({block_.strings(static_cast<int>(ki)), ki, vi});
  }
  // Sorted by the (repaired) key string; insertion sort: sets are small, it is stable (repeated
  // keys keep their order) and allocates nothing.
  for (size_t i = 1; i < scratch_.size(); ++i)
    for (size_t j = i; j > 0 && scratch_[j].key < scratch_[j - 1].key; --j) std::swap(scratch_[j], scratch_[j - 1]);
  scratch_key_.clear();
  for (const auto& p : scratch_) {
    scratch_key_.append(reinterpret_cast<const char*>(&p.k), sizeof(uint32_t));
    scratch_key_.append(reinterpret_cast<const char*>(&p.v), sizeof(uint32_t));
  }
  if (auto it = pair_sets_.find(std::string_view(scratch_key_)); it != pair_sets_.end()) return it->second;
  const auto index = static_cast<uint32_t>(block_.pair_sets_size());
  auto* set = block_.add_pair_sets();
  for (const auto& p : scratch_) {
    set->add_keys(p.k);
    set->add_values(p.v);
  }
  pair_sets_.emplace(scratch_key_, index);
  return index;
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
  return intern(raw);
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
    pair_sets_.clear();
    error = std::move(why);
    return false;
  };
  if (!block_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return fail("event block does not parse");
  const auto nstrings = static_cast<uint32_t>(block_.strings_size());
  const auto nsets = static_cast<uint32_t>(block_.pair_sets_size());
  // Index 0 means unset even when a dictionary is empty (a block with no strings at all).
  if (nstrings > 0 && !block_.strings(0).empty()) return fail("event block: strings[0] must be \"\"");
  if (nsets > 0 && (block_.pair_sets(0).keys_size() != 0 || block_.pair_sets(0).values_size() != 0))
    return fail("event block: pair_sets[0] must be empty");
  auto str_ok = [&](uint32_t i) { return i == 0 || i < nstrings; };
  pair_sets_.resize(std::max<uint32_t>(nsets, 1));
  for (uint32_t s = 0; s < nsets; ++s) {
    const auto& set = block_.pair_sets(static_cast<int>(s));
    if (set.keys_size() != set.values_size()) return fail("event block: pair set " + std::to_string(s) + " has unequal keys and values");
    auto& out = pair_sets_[s];
    out.reserve(static_cast<size_t>(set.keys_size()));
    for (int j = 0; j < set.keys_size(); ++j) {
      if (!str_ok(set.keys(j)) || !str_ok(set.values(j)))
        return fail("event block: pair set " + std::to_string(s) + " names a string out of range");
      out.emplace_back(block_.strings(static_cast<int>(set.keys(j))), block_.strings(static_cast<int>(set.values(j))));
    }
  }
  for (int i = 0; i < block_.events_size(); ++i) {
    const auto& e = block_.events(i);
    const auto where = [&](const char* what) { return "event block: event " + std::to_string(i) + " " + what; };
    if (e.kind() < mcp::v1::EVENT_KIND_UPROBE || e.kind() > mcp::v1::EVENT_KIND_USDT) return fail(where("has an unknown kind"));
    if (!str_ok(e.probe()) || !str_ok(e.comm()) || !str_ok(e.container_id()) || !str_ok(e.pod_uid()) || !str_ok(e.pod_name()) ||
        !str_ok(e.pod_namespace()) || !str_ok(e.container_name()) || !str_ok(e.service()) || !str_ok(e.th()))
      return fail(where("names a string out of range"));
    if (e.tags() >= pair_sets_.size() || e.attributes() >= pair_sets_.size() || e.pod_labels() >= pair_sets_.size())
      return fail(where("names a pair set out of range"));
    if (e.args_size() > 6) return fail(where("has more than 6 args"));
    if (e.has_cuda()) {
      const auto& c = e.cuda();
      if (!str_ok(c.api()) || !str_ok(c.kernel())) return fail(where("names a CUDA string out of range"));
      if (c.grid_size() > 3 || c.block_size() > 3) return fail(where("has a CUDA grid or block of more than 3"));
    }
  }
  return true;
}

const std::string& EventBlockDecoder::text(uint32_t index) const {
  static const std::string kEmpty;
  return index < static_cast<uint32_t>(block_.strings_size()) ? block_.strings(static_cast<int>(index)) : kEmpty;
}

void EventBlockDecoder::get(size_t i, Event& out, uint64_t& event_id) const {
  const auto& e = block_.events(static_cast<int>(i));
  wire::event_from_proto(e, out, *this);
  event_id = e.event_id();
}

void from_sample(const mcp::v1::Sample& s, Event& out) { wire::event_from_proto(s, out, InlineDecode{}); }

void to_sample(const Event& e, mcp::v1::Sample* s) {
  InlineEncode codec;
  wire::event_to_proto(e, *s, codec);
}

}  // namespace mcp
