#include "broker/event_block.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "otlp/mapping.h"

namespace mcp::broker {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using mcp::v1::EventBlock;

constexpr int kBlockEvents = 3;  // EventBlock.events

const std::string& empty_string() {
  static const std::string empty;
  return empty;
}

using otlp::kind_name;

mcp::v1::EventKind kind_of(const std::string& name) {
  if (name == "uprobe") return mcp::v1::EVENT_KIND_UPROBE;
  if (name == "uretprobe") return mcp::v1::EVENT_KIND_URETPROBE;
  if (name == "syscall") return mcp::v1::EVENT_KIND_SYSCALL;
  if (name == "cuda") return mcp::v1::EVENT_KIND_CUDA;
  if (name == "usdt") return mcp::v1::EVENT_KIND_USDT;
  return mcp::v1::EVENT_KIND_UNSPECIFIED;
}

Verdict out_of_range(int event, const char* field, uint64_t index) {
  return Verdict::invalid("event " + std::to_string(event) + ": " + field + " index " +
                          std::to_string(index) + " out of range");
}

// Builds the dictionaries of one block: each distinct string and pair set once.
class Dictionary {
 public:
  explicit Dictionary(EventBlock* block) : block_(block) {
    block_->add_strings();   // index 0: ""
    block_->add_pair_sets(); // index 0: no pairs
    strings_.emplace(std::string(), 0);
  }
  uint32_t string(const std::string& s) {
    if (s.empty()) return 0;
    const auto [it, added] = strings_.emplace(s, static_cast<uint32_t>(block_->strings_size()));
    if (added) block_->add_strings(s);
    return it->second;
  }
  template <typename Map>
  uint32_t pairs(const Map& map) {
    if (map.empty()) return 0;
    std::vector<std::pair<const std::string*, const std::string*>> sorted;
    sorted.reserve(map.size());
    for (const auto& [k, v] : map) sorted.emplace_back(&k, &v);
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
    std::vector<uint32_t> key;
    key.reserve(sorted.size() * 2);
    for (const auto& [k, v] : sorted) {
      key.push_back(string(*k));
      key.push_back(string(*v));
    }
    const auto [it, added] = sets_.emplace(key, static_cast<uint32_t>(block_->pair_sets_size()));
    if (added) {
      auto* set = block_->add_pair_sets();
      for (size_t i = 0; i < key.size(); i += 2) {
        set->add_keys(key[i]);
        set->add_values(key[i + 1]);
      }
    }
    return it->second;
  }

 private:
  EventBlock* block_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::map<std::vector<uint32_t>, uint32_t> sets_;
};

template <typename Map>
void copy_pairs(const EventBlock& block, uint32_t set, Map* out) {
  if (set == 0) return;
  const auto& pairs = block.pair_sets(static_cast<int>(set));
  for (int i = 0; i < pairs.keys_size(); ++i)
    (*out)[block_string(block, pairs.keys(i))] = block_string(block, pairs.values(i));
}

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
  const auto strings = static_cast<uint64_t>(block.strings_size());
  const auto sets = static_cast<uint64_t>(block.pair_sets_size());
  if (strings > 0 && !block.strings(0).empty()) return Verdict::invalid("EventBlock strings[0] is not empty");
  if (sets > 0 && block.pair_sets(0).keys_size() + block.pair_sets(0).values_size() > 0)
    return Verdict::invalid("EventBlock pair_sets[0] is not empty");
  const auto str_ok = [&](uint64_t i) { return i == 0 || i < strings; };
  for (int i = 0; i < block.pair_sets_size(); ++i) {
    const auto& set = block.pair_sets(i);
    if (set.keys_size() != set.values_size())
      return Verdict::invalid("EventBlock pair set " + std::to_string(i) + " has " +
                              std::to_string(set.keys_size()) + " keys but " +
                              std::to_string(set.values_size()) + " values");
    for (int k = 0; k < set.keys_size(); ++k)
      if (!str_ok(set.keys(k)) || !str_ok(set.values(k)))
        return Verdict::invalid("EventBlock pair set " + std::to_string(i) + ": string index out of range");
  }
  for (int i = 0; i < block.events_size(); ++i) {
    const auto& e = block.events(i);
    if (kind_name(e.kind()).empty())
      return Verdict::invalid("event " + std::to_string(i) + ": unknown kind " + std::to_string(e.kind()));
    if (!str_ok(e.probe())) return out_of_range(i, "probe", e.probe());
    if (!str_ok(e.comm())) return out_of_range(i, "comm", e.comm());
    if (!str_ok(e.container_id())) return out_of_range(i, "container_id", e.container_id());
    if (!str_ok(e.pod_uid())) return out_of_range(i, "pod_uid", e.pod_uid());
    if (!str_ok(e.pod_name())) return out_of_range(i, "pod_name", e.pod_name());
    if (!str_ok(e.pod_namespace())) return out_of_range(i, "pod_namespace", e.pod_namespace());
    if (!str_ok(e.container_name())) return out_of_range(i, "container_name", e.container_name());
    if (e.pod_labels() != 0 && e.pod_labels() >= sets) return out_of_range(i, "pod_labels", e.pod_labels());
    if (!str_ok(e.service())) return out_of_range(i, "service", e.service());
    if (!str_ok(e.th())) return out_of_range(i, "th", e.th());
    if (e.tags() != 0 && e.tags() >= sets) return out_of_range(i, "tags", e.tags());
    if (e.attributes() != 0 && e.attributes() >= sets) return out_of_range(i, "attributes", e.attributes());
    if (e.has_cuda() && (!str_ok(e.cuda().api()) || !str_ok(e.cuda().kernel())))
      return out_of_range(i, "cuda name", std::max(e.cuda().api(), e.cuda().kernel()));
    if (e.threshold() == 0)
      return Verdict::invalid("event " + std::to_string(i) +
                              " has threshold 0 (probability 0, infinite weight)");
  }
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

const std::string& block_string(const EventBlock& block, uint32_t index) {
  return index == 0 ? empty_string() : block.strings(static_cast<int>(index));
}

void block_to_samples(const EventBlock& block, const std::string& agent_id,
                      google::protobuf::RepeatedPtrField<mcp::v1::Sample>* out) {
  out->Reserve(out->size() + block.events_size());
  for (const auto& e : block.events()) {
    auto* s = out->Add();
    s->set_ts_ns(e.ts_ns());
    s->set_ktime_ns(e.ktime_ns());
    s->set_hlc(e.hlc());
    s->set_kind(std::string(kind_name(e.kind())));
    s->set_probe(block_string(block, e.probe()));
    s->set_probe_id(e.probe_id());
    s->set_pid(e.pid());
    s->set_tid(e.tid());
    s->set_cpu(e.cpu());
    s->set_cgroup_id(e.cgroup_id());
    s->set_comm(block_string(block, e.comm()));
    s->set_container_id(block_string(block, e.container_id()));
    s->set_pod_uid(block_string(block, e.pod_uid()));
    s->set_pod_name(block_string(block, e.pod_name()));
    s->set_pod_namespace(block_string(block, e.pod_namespace()));
    s->set_container_name(block_string(block, e.container_name()));
    copy_pairs(block, e.pod_labels(), s->mutable_pod_labels());
    s->set_service(block_string(block, e.service()));
    copy_pairs(block, e.tags(), s->mutable_tags());
    s->mutable_args()->CopyFrom(e.args());
    s->set_has_ret(e.has_ret());
    s->set_ret(e.ret());
    s->set_has_duration(e.has_duration());
    s->set_duration_ns(e.duration_ns());
    s->set_threshold(e.threshold());
    if (e.has_cuda()) {
      const auto& c = e.cuda();
      auto* sc = s->mutable_cuda();
      sc->set_api(block_string(block, c.api()));
      sc->set_kernel(block_string(block, c.kernel()));
      sc->mutable_grid()->CopyFrom(c.grid());
      sc->mutable_block()->CopyFrom(c.block());
      sc->set_shared_mem(c.shared_mem());
      sc->set_stream(c.stream());
      sc->set_bytes(c.bytes());
      sc->set_memcpy_kind(c.memcpy_kind());
      sc->set_slow_mode(c.slow_mode());
      sc->set_launch(c.launch());
      sc->mutable_user_stack()->CopyFrom(c.user_stack());
      sc->set_graph(c.graph());
      if (c.has_graph_kernel_nodes()) sc->set_graph_kernel_nodes(c.graph_kernel_nodes());
    }
    copy_pairs(block, e.attributes(), s->mutable_attributes());
    s->set_trace_id(e.trace_id());
    s->set_trace_id_high(e.trace_id_high());
    s->set_event_id(e.event_id());
    s->set_agent_id(agent_id);
    s->set_th(block_string(block, e.th()));
  }
}

void samples_to_block(const google::protobuf::RepeatedPtrField<mcp::v1::Sample>& samples,
                      EventBlock* out) {
  out->Clear();
  Dictionary dict(out);
  out->mutable_events()->Reserve(samples.size());
  for (const auto& s : samples) {
    auto* e = out->add_events();
    e->set_ts_ns(s.ts_ns());
    e->set_ktime_ns(s.ktime_ns());
    e->set_hlc(s.hlc());
    e->set_kind(kind_of(s.kind()));
    e->set_probe(dict.string(s.probe()));
    e->set_probe_id(s.probe_id());
    e->set_pid(s.pid());
    e->set_tid(s.tid());
    e->set_cpu(s.cpu());
    e->set_cgroup_id(s.cgroup_id());
    e->set_comm(dict.string(s.comm()));
    e->set_container_id(dict.string(s.container_id()));
    e->set_pod_uid(dict.string(s.pod_uid()));
    e->set_pod_name(dict.string(s.pod_name()));
    e->set_pod_namespace(dict.string(s.pod_namespace()));
    e->set_container_name(dict.string(s.container_name()));
    e->set_pod_labels(dict.pairs(s.pod_labels()));
    e->set_service(dict.string(s.service()));
    e->set_tags(dict.pairs(s.tags()));
    e->mutable_args()->CopyFrom(s.args());
    e->set_has_ret(s.has_ret());
    e->set_ret(s.ret());
    e->set_has_duration(s.has_duration());
    e->set_duration_ns(s.duration_ns());
    e->set_threshold(s.threshold());
    if (s.has_cuda()) {
      const auto& c = s.cuda();
      auto* ec = e->mutable_cuda();
      ec->set_api(dict.string(c.api()));
      ec->set_kernel(dict.string(c.kernel()));
      ec->mutable_grid()->CopyFrom(c.grid());
      ec->mutable_block()->CopyFrom(c.block());
      ec->set_shared_mem(c.shared_mem());
      ec->set_stream(c.stream());
      ec->set_bytes(c.bytes());
      ec->set_memcpy_kind(c.memcpy_kind());
      ec->set_slow_mode(c.slow_mode());
      ec->set_launch(c.launch());
      ec->mutable_user_stack()->CopyFrom(c.user_stack());
      ec->set_graph(c.graph());
      if (c.has_graph_kernel_nodes()) ec->set_graph_kernel_nodes(c.graph_kernel_nodes());
    }
    e->set_attributes(dict.pairs(s.attributes()));
    e->set_trace_id(s.trace_id());
    e->set_trace_id_high(s.trace_id_high());
    e->set_event_id(s.event_id());
    e->set_th(dict.string(s.th()));
  }
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
