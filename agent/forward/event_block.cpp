#include "forward/event_block.h"

#include <algorithm>
#include <cstring>

#include "common/utf8.h"

namespace mcp {
namespace {

mcp::v1::EventKind to_wire(EventKind k) {
  switch (k) {
    case EventKind::kUprobe: return mcp::v1::EVENT_KIND_UPROBE;
    case EventKind::kUretprobe: return mcp::v1::EVENT_KIND_URETPROBE;
    case EventKind::kSyscall: return mcp::v1::EVENT_KIND_SYSCALL;
    case EventKind::kCuda: return mcp::v1::EVENT_KIND_CUDA;
  }
  return mcp::v1::EVENT_KIND_UNSPECIFIED;
}

EventKind from_wire(int k) {
  switch (k) {
    case mcp::v1::EVENT_KIND_URETPROBE: return EventKind::kUretprobe;
    case mcp::v1::EVENT_KIND_SYSCALL: return EventKind::kSyscall;
    case mcp::v1::EVENT_KIND_CUDA: return EventKind::kCuda;
    default: return EventKind::kUprobe;
  }
}

EventKind kind_from_name(std::string_view k) {
  if (k == "uretprobe") return EventKind::kUretprobe;
  if (k == "syscall") return EventKind::kSyscall;
  if (k == "cuda") return EventKind::kCuda;
  return EventKind::kUprobe;
}

// comm is 16 bytes in Event; a longer (repaired) comm is cut at a character boundary.
void set_comm(Event& out, std::string_view comm) {
  out.comm.fill(0);
  size_t n = std::min(comm.size(), out.comm.size());
  while (n > 0 && n < comm.size() && (static_cast<unsigned char>(comm[n]) & 0xC0) == 0x80) --n;
  std::memcpy(out.comm.data(), comm.data(), n);
}

template <typename Repeated, typename Array>
void copy_triplet(const Repeated& in, Array& out) {
  out.fill(0);
  for (int i = 0; i < in.size() && i < static_cast<int>(out.size()); ++i) out[static_cast<size_t>(i)] = in[i];
}

// The numeric CUDA fields, named alike in CompactCuda and v1's CudaDetails (the names differ:
// indices in one, strings in the other, so the callers copy those).
template <typename Cuda>
void copy_cuda_numbers(const Cuda& c, CudaInfo& out) {
  copy_triplet(c.grid(), out.grid);
  copy_triplet(c.block(), out.block);
  out.shared_mem = c.shared_mem();
  out.stream = c.stream();
  out.bytes = c.bytes();
  out.memcpy_kind = c.memcpy_kind();
  out.slow_mode = c.slow_mode();
  out.launch = c.launch();
  out.user_stack.assign(c.user_stack().begin(), c.user_stack().end());
  out.graph = c.graph();
  if (c.has_graph_kernel_nodes()) out.graph_kernel_nodes = c.graph_kernel_nodes();
  else out.graph_kernel_nodes.reset();
}

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

void EventBlockEncoder::add(const Event& e) {
  auto* c = block_.add_events();
  c->set_ts_ns(e.ts_ns);
  c->set_ktime_ns(e.ktime_ns);
  c->set_hlc(e.hlc);
  c->set_kind(to_wire(e.kind));
  c->set_probe(intern(probe_, e.probe));
  c->set_probe_id(e.probe_id);
  c->set_pid(e.pid);
  c->set_tid(e.tid);
  c->set_cpu(e.cpu);
  c->set_cgroup_id(e.cgroup_id);
  c->set_comm(intern(comm_, e.comm_view()));
  c->set_container_id(intern(container_id_, e.container_id));
  c->set_pod_uid(intern(pod_uid_, e.pod_uid));
  c->set_pod_name(intern(e.pod));
  c->set_pod_namespace(intern(e.pod_namespace));
  c->set_container_name(intern(e.container));
  c->set_pod_labels(intern_pairs(e.pod_labels));
  c->set_service(intern(service_, e.service));
  c->set_tags(intern_pairs(e.tags));
  for (uint8_t i = 0; i < e.nargs && i < e.args.size(); ++i) c->add_args(e.args[i]);
  c->set_has_ret(e.has_ret);
  c->set_ret(e.ret);
  c->set_has_duration(e.has_duration);
  c->set_duration_ns(e.duration_ns);
  c->set_threshold(e.threshold);
  c->set_attributes(intern_pairs(e.attributes));
  if (e.consistent) c->set_th(intern(otel_th(e.threshold)));
  c->set_trace_id(e.trace_id_lo);
  c->set_trace_id_high(e.trace_id_hi);
  if (e.kind == EventKind::kCuda) {
    auto* cu = c->mutable_cuda();
    cu->set_api(intern(e.cuda.api));
    cu->set_kernel(intern(e.cuda.kernel));
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
}

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
    if (e.kind() < mcp::v1::EVENT_KIND_UPROBE || e.kind() > mcp::v1::EVENT_KIND_CUDA) return fail(where("has an unknown kind"));
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

void EventBlockDecoder::get(size_t i, Event& out, uint64_t& event_id) const {
  const auto& e = block_.events(static_cast<int>(i));
  static const std::string kEmpty;
  const auto str = [&](uint32_t idx) -> const std::string& {
    return idx < static_cast<uint32_t>(block_.strings_size()) ? block_.strings(static_cast<int>(idx)) : kEmpty;
  };
  out.ts_ns = e.ts_ns();
  out.ktime_ns = e.ktime_ns();
  out.hlc = e.hlc();
  out.kind = from_wire(e.kind());
  out.probe = str(e.probe());
  out.probe_id = e.probe_id();
  out.pid = e.pid();
  out.tid = e.tid();
  out.cpu = e.cpu();
  out.cgroup_id = e.cgroup_id();
  set_comm(out, str(e.comm()));
  out.nargs = static_cast<uint8_t>(e.args_size());
  for (int a = 0; a < e.args_size(); ++a) out.args[static_cast<size_t>(a)] = e.args(a);
  out.has_ret = e.has_ret();
  out.ret = e.ret();
  out.has_duration = e.has_duration();
  out.duration_ns = e.duration_ns();
  out.threshold = e.threshold();
  out.consistent = e.th() != 0;
  out.trace_id_hi = e.trace_id_high();
  out.trace_id_lo = e.trace_id();
  out.service = str(e.service());
  out.container_id = str(e.container_id());
  out.pod_uid = str(e.pod_uid());
  out.pod = str(e.pod_name());
  out.pod_namespace = str(e.pod_namespace());
  out.container = str(e.container_name());
  out.pod_labels = pair_sets_[e.pod_labels()];
  out.tags = pair_sets_[e.tags()];
  out.attributes = pair_sets_[e.attributes()];
  event_id = e.event_id();
  if (e.has_cuda()) {
    const auto& c = e.cuda();
    out.cuda.api = str(c.api());
    out.cuda.kernel = str(c.kernel());
    copy_cuda_numbers(c, out.cuda);
  } else {
    out.cuda = CudaInfo{};
  }
}

void from_sample(const mcp::v1::Sample& s, Event& out) {
  out.ts_ns = s.ts_ns();
  out.ktime_ns = s.ktime_ns();
  out.hlc = s.hlc();
  out.kind = kind_from_name(s.kind());
  out.probe = s.probe();
  out.probe_id = s.probe_id();
  out.pid = s.pid();
  out.tid = s.tid();
  out.cpu = s.cpu();
  out.cgroup_id = s.cgroup_id();
  set_comm(out, s.comm());
  out.nargs = static_cast<uint8_t>(std::min(s.args_size(), 6));
  for (int a = 0; a < out.nargs; ++a) out.args[static_cast<size_t>(a)] = s.args(a);
  out.has_ret = s.has_ret();
  out.ret = s.ret();
  out.has_duration = s.has_duration();
  out.duration_ns = s.duration_ns();
  out.threshold = s.threshold();
  out.consistent = !s.th().empty();
  out.trace_id_hi = s.trace_id_high();
  out.trace_id_lo = s.trace_id();
  out.service = s.service();
  out.container_id = s.container_id();
  out.pod_uid = s.pod_uid();
  out.pod = s.pod_name();
  out.pod_namespace = s.pod_namespace();
  out.container = s.container_name();
  out.pod_labels.assign(s.pod_labels().begin(), s.pod_labels().end());
  // proto maps have no order; the JSON encoder prints pairs sorted by key.
  out.tags.assign(s.tags().begin(), s.tags().end());
  out.attributes.assign(s.attributes().begin(), s.attributes().end());
  if (s.has_cuda()) {
    const auto& c = s.cuda();
    out.cuda.api = c.api();
    out.cuda.kernel = c.kernel();
    copy_cuda_numbers(c, out.cuda);
  } else {
    out.cuda = CudaInfo{};
  }
}

}  // namespace mcp
