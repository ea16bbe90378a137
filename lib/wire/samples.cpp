#include "wire/samples.h"

#include "common/utf8.h"
#include "wire/block_check.h"
#include "wire/dictionary.h"
#include "wire/event_fields.h"
#include "wire/kind.h"

namespace mcp {
namespace {

using namespace wire;

using StringMap = google::protobuf::Map<std::string, std::string>;

// v1 Samples hold their strings; repaired as in the compact dictionary, since one invalid byte in
// a proto3 string makes the whole message unparseable.
struct InlineEncode {
  std::string text(std::string_view raw, Hot) const { return valid_utf8(raw); }
};

struct InlineDecode {
  const std::string& text(const std::string& s) const { return s; }
  const StringMap& pairs(const StringMap& m) const { return m; }
};

// Reads a checked block's indices into a Sample.
struct BlockToSample {
  const mcp::v1::EventBlock& block;
  const std::string& text(uint32_t index) const { return block_string(block, index); }
  std::string kind(int k) const { return std::string(kind_name(k)); }
  void pairs(uint32_t set, StringMap* out) const {
    if (set == 0) return;
    const auto& pairs = block.pair_sets(static_cast<int>(set));
    for (int i = 0; i < pairs.keys_size(); ++i) (*out)[text(pairs.keys(i))] = text(pairs.values(i));
  }
};

// Interns a Sample's strings and maps into the block's dictionaries.
struct SampleToBlock {
  Dictionary& dict;
  uint32_t text(const std::string& s) const { return dict.string(s); }
  mcp::v1::EventKind kind(const std::string& name) const {
    const auto k = kind_from_name(name);
    return k ? kind_to_wire(*k) : mcp::v1::EVENT_KIND_UNSPECIFIED;  // refused by check_block
  }
  uint32_t pairs(const StringMap& map) const { return dict.pairs(map); }
};

// The fields Sample and CompactEvent share, from one to the other: strings, pair sets and the
// kind through the codec. A field added to both messages is added here once.
template <class From, class To, class Codec>
void convert(const From& in, To& out, const Codec& codec) {
  out.set_ts_ns(in.ts_ns());
  out.set_ktime_ns(in.ktime_ns());
  out.set_hlc(in.hlc());
  out.set_kind(codec.kind(in.kind()));
  out.set_probe(codec.text(in.probe()));
  out.set_probe_id(in.probe_id());
  out.set_pid(in.pid());
  out.set_tid(in.tid());
  out.set_cpu(in.cpu());
  out.set_cgroup_id(in.cgroup_id());
  out.set_comm(codec.text(in.comm()));
  out.set_container_id(codec.text(in.container_id()));
  out.set_pod_uid(codec.text(in.pod_uid()));
  out.set_pod_name(codec.text(in.pod_name()));
  out.set_pod_namespace(codec.text(in.pod_namespace()));
  out.set_container_name(codec.text(in.container_name()));
  out.set_service(codec.text(in.service()));
  out.mutable_args()->CopyFrom(in.args());
  out.set_has_ret(in.has_ret());
  out.set_ret(in.ret());
  out.set_has_duration(in.has_duration());
  out.set_duration_ns(in.duration_ns());
  out.set_threshold(in.threshold());
  out.set_trace_id(in.trace_id());
  out.set_trace_id_high(in.trace_id_high());
  out.set_event_id(in.event_id());
  out.set_th(codec.text(in.th()));
  if constexpr (kInline<To>) {
    codec.pairs(in.pod_labels(), out.mutable_pod_labels());
    codec.pairs(in.tags(), out.mutable_tags());
    codec.pairs(in.attributes(), out.mutable_attributes());
  } else {
    out.set_pod_labels(codec.pairs(in.pod_labels()));
    out.set_tags(codec.pairs(in.tags()));
    out.set_attributes(codec.pairs(in.attributes()));
  }
  if (!in.has_cuda()) return;
  const auto& c = in.cuda();
  auto* oc = out.mutable_cuda();
  oc->set_api(codec.text(c.api()));
  oc->set_kernel(codec.text(c.kernel()));
  oc->mutable_grid()->CopyFrom(c.grid());
  oc->mutable_block()->CopyFrom(c.block());
  oc->set_shared_mem(c.shared_mem());
  oc->set_stream(c.stream());
  oc->set_bytes(c.bytes());
  oc->set_memcpy_kind(c.memcpy_kind());
  oc->set_slow_mode(c.slow_mode());
  oc->set_launch(c.launch());
  oc->mutable_user_stack()->CopyFrom(c.user_stack());
  oc->set_graph(c.graph());
  if (c.has_graph_kernel_nodes()) oc->set_graph_kernel_nodes(c.graph_kernel_nodes());
}

}  // namespace

void from_sample(const mcp::v1::Sample& s, Event& out) { event_from_proto(s, out, InlineDecode{}); }

void to_sample(const Event& e, mcp::v1::Sample* s) {
  InlineEncode codec;
  event_to_proto(e, *s, codec);
}

void block_to_samples(const mcp::v1::EventBlock& block, const std::string& agent_id,
                      google::protobuf::RepeatedPtrField<mcp::v1::Sample>* out) {
  out->Reserve(out->size() + block.events_size());
  const BlockToSample codec{block};
  for (const auto& e : block.events()) {
    auto* s = out->Add();
    convert(e, *s, codec);
    s->set_agent_id(agent_id);
  }
}

void samples_to_block(const google::protobuf::RepeatedPtrField<mcp::v1::Sample>& samples,
                      mcp::v1::EventBlock* out) {
  Dictionary dict(out);  // clears *out
  const SampleToBlock codec{dict};
  out->mutable_events()->Reserve(samples.size());
  for (const auto& s : samples) convert(s, *out->add_events(), codec);
}

}  // namespace mcp
