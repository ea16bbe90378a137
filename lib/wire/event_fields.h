// The one mapping between mcp::Event and its two wire forms: v1 `Sample` (strings and pair
// maps inline) and compact `CompactEvent` (strings and pair sets as indices into the block's
// dictionaries). Both messages name their fields alike; what differs is how a string, a pair set
// and the kind travel, and the caller's codec supplies that:
//   encoding: codec.text(value, Hot) -> what the message's string field holds (Hot names the
//             fields worth memoising: runs of events repeat them); codec.pairs(pairs) -> a
//             compact pair-set index (inline maps are filled here)
//   decoding: codec.text(field) -> const std::string&; codec.pairs(field) -> a range of pairs
// A field added to the proto is added here once, for every form. Kinds: wire/kind.h.
#pragma once
#include <algorithm>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "common/event.h"
#include "mcp/v1/sampling.pb.h"
#include "wire/kind.h"

namespace mcp::wire {

enum class Hot { kNone, kProbe, kComm, kService, kContainerId, kPodUid };

template <class Msg>
inline constexpr bool kInline = std::is_same_v<Msg, mcp::v1::Sample>;

// comm is 16 bytes in Event; a longer (repaired) comm is cut at a character boundary.
inline void set_comm(Event& out, std::string_view comm) {
  out.comm.fill(0);
  size_t n = std::min(comm.size(), out.comm.size());
  while (n > 0 && n < comm.size() && (static_cast<unsigned char>(comm[n]) & 0xC0) == 0x80) --n;
  std::memcpy(out.comm.data(), comm.data(), n);
}

template <class Msg, class Codec>
void event_to_proto(const Event& e, Msg& m, Codec& codec) {
  m.set_ts_ns(e.ts_ns);
  m.set_ktime_ns(e.ktime_ns);
  m.set_hlc(e.hlc);
  if constexpr (kInline<Msg>) m.set_kind(std::string(to_string(e.kind)));
  else m.set_kind(kind_to_wire(e.kind));
  m.set_probe(codec.text(e.probe, Hot::kProbe));
  m.set_probe_id(e.probe_id);
  m.set_pid(e.pid);
  m.set_tid(e.tid);
  m.set_cpu(e.cpu);
  m.set_cgroup_id(e.cgroup_id);
  m.set_comm(codec.text(e.comm_view(), Hot::kComm));
  m.set_container_id(codec.text(e.container_id, Hot::kContainerId));
  m.set_pod_uid(codec.text(e.pod_uid, Hot::kPodUid));
  m.set_pod_name(codec.text(e.pod, Hot::kNone));
  m.set_pod_namespace(codec.text(e.pod_namespace, Hot::kNone));
  m.set_container_name(codec.text(e.container, Hot::kNone));
  m.set_service(codec.text(e.service, Hot::kService));
  for (uint8_t i = 0; i < e.nargs && i < e.args.size(); ++i) m.add_args(e.args[i]);
  m.set_has_ret(e.has_ret);
  m.set_ret(e.ret);
  m.set_has_duration(e.has_duration);
  m.set_duration_ns(e.duration_ns);
  m.set_threshold(e.threshold);
  if (e.consistent) m.set_th(codec.text(otel_th(e.threshold), Hot::kNone));
  m.set_trace_id(e.trace_id_lo);
  m.set_trace_id_high(e.trace_id_hi);
  if constexpr (kInline<Msg>) {
    const auto fill = [&](auto* map, const auto& pairs) {
      for (const auto& [k, v] : pairs) (*map)[codec.text(k, Hot::kNone)] = codec.text(v, Hot::kNone);
    };
    fill(m.mutable_pod_labels(), e.pod_labels);
    fill(m.mutable_tags(), e.tags);
    fill(m.mutable_attributes(), e.attributes);
  } else {
    m.set_pod_labels(codec.pairs(e.pod_labels));
    m.set_tags(codec.pairs(e.tags));
    m.set_attributes(codec.pairs(e.attributes));
  }
  if (e.kind != EventKind::kCuda) return;
  auto* cu = m.mutable_cuda();
  cu->set_api(codec.text(e.cuda.api, Hot::kNone));
  cu->set_kernel(codec.text(e.cuda.kernel, Hot::kNone));
  for (uint32_t g : e.cuda.grid) cu->add_grid(g);
  for (uint32_t b : e.cuda.block) cu->add_block(b);
  cu->set_shared_mem(e.cuda.shared_mem);
  cu->set_stream(e.cuda.stream);
  cu->set_bytes(e.cuda.bytes);
  cu->set_memcpy_kind(e.cuda.memcpy_kind);
  cu->set_slow_mode(e.cuda.slow_mode);
  cu->set_launch(e.cuda.launch);
  for (uint64_t pc : e.cuda.user_stack) cu->add_user_stack(pc);
  cu->set_graph(e.cuda.graph);
  if (e.cuda.graph_kernel_nodes) cu->set_graph_kernel_nodes(*e.cuda.graph_kernel_nodes);
}

template <typename Repeated, typename Array>
void copy_triplet(const Repeated& in, Array& out) {
  out.fill(0);
  for (int i = 0; i < in.size() && i < static_cast<int>(out.size()); ++i) out[static_cast<size_t>(i)] = in[i];
}

// `out` is reused by callers: once warm this allocates nothing for the compact form.
template <class Msg, class Codec>
void event_from_proto(const Msg& m, Event& out, const Codec& codec) {
  out.ts_ns = m.ts_ns();
  out.ktime_ns = m.ktime_ns();
  out.hlc = m.hlc();
  // Anything unknown reads as a uprobe (a checked block has no unknown kind).
  if constexpr (kInline<Msg>) out.kind = kind_from_name(m.kind()).value_or(EventKind::kUprobe);
  else out.kind = kind_from_wire(m.kind()).value_or(EventKind::kUprobe);
  out.probe = codec.text(m.probe());
  out.probe_id = m.probe_id();
  out.pid = m.pid();
  out.tid = m.tid();
  out.cpu = m.cpu();
  out.cgroup_id = m.cgroup_id();
  set_comm(out, codec.text(m.comm()));
  out.container_id = codec.text(m.container_id());
  out.pod_uid = codec.text(m.pod_uid());
  out.pod = codec.text(m.pod_name());
  out.pod_namespace = codec.text(m.pod_namespace());
  out.container = codec.text(m.container_name());
  out.service = codec.text(m.service());
  out.nargs = static_cast<uint8_t>(std::min<int>(m.args_size(), static_cast<int>(out.args.size())));
  for (int a = 0; a < out.nargs; ++a) out.args[static_cast<size_t>(a)] = m.args(a);
  out.has_ret = m.has_ret();
  out.ret = m.ret();
  out.has_duration = m.has_duration();
  out.duration_ns = m.duration_ns();
  out.threshold = m.threshold();
  out.consistent = !codec.text(m.th()).empty();
  out.trace_id_hi = m.trace_id_high();
  out.trace_id_lo = m.trace_id();
  // v1's maps have no order; the JSON encoder prints pairs sorted by key.
  const auto assign = [](auto& to, const auto& from) { to.assign(from.begin(), from.end()); };
  assign(out.pod_labels, codec.pairs(m.pod_labels()));
  assign(out.tags, codec.pairs(m.tags()));
  assign(out.attributes, codec.pairs(m.attributes()));
  if (!m.has_cuda()) {
    out.cuda = CudaInfo{};
    return;
  }
  const auto& c = m.cuda();
  out.cuda.api = codec.text(c.api());
  out.cuda.kernel = codec.text(c.kernel());
  copy_triplet(c.grid(), out.cuda.grid);
  copy_triplet(c.block(), out.cuda.block);
  out.cuda.shared_mem = c.shared_mem();
  out.cuda.stream = c.stream();
  out.cuda.bytes = c.bytes();
  out.cuda.memcpy_kind = c.memcpy_kind();
  out.cuda.slow_mode = c.slow_mode();
  out.cuda.launch = c.launch();
  out.cuda.user_stack.assign(c.user_stack().begin(), c.user_stack().end());
  out.cuda.graph = c.graph();
  if (c.has_graph_kernel_nodes()) out.cuda.graph_kernel_nodes = c.graph_kernel_nodes();
  else out.cuda.graph_kernel_nodes.reset();
}

}  // namespace mcp::wire
