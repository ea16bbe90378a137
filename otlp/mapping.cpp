#include "otlp/mapping.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "common/call_error.h"
#include "common/event.h"
#include "common/mix64.h"
#include "common/utf8.h"
#include "wire/block_check.h"
#include "wire/kind.h"

namespace mcp::otlp {
namespace {

namespace common = opentelemetry::proto::common::v1;
namespace trace = opentelemetry::proto::trace::v1;
namespace logs = opentelemetry::proto::logs::v1;
using Attributes = google::protobuf::RepeatedPtrField<common::KeyValue>;

// SplitMix64's finaliser: spreads an event id over all 64 bits for the made-up trace ids.
void put_be64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// Never 0 (OTLP treats an all-zero id as invalid): the event id, else a random one.
uint64_t nonzero_id(uint64_t preferred) {
  if (preferred != 0) return preferred;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

bool has_trace_id(const mcp::v1::CompactEvent& e) { return (e.trace_id_high() | e.trace_id()) != 0; }

// Blocks reach the mapping unchecked (the agent's own encoder): out of range reads as "".
const std::string& str(const mcp::v1::EventBlock& b, uint32_t index) { return wire::block_string(b, index); }

void add_string(Attributes* attrs, std::string_view key, std::string_view value) {
  auto* kv = attrs->Add();
  kv->set_key(std::string(key));
  kv->mutable_value()->set_string_value(valid_utf8(value));
}
void add_int(Attributes* attrs, std::string_view key, int64_t value) {
  auto* kv = attrs->Add();
  kv->set_key(std::string(key));
  kv->mutable_value()->set_int_value(value);
}
void add_double(Attributes* attrs, std::string_view key, double value) {
  auto* kv = attrs->Add();
  kv->set_key(std::string(key));
  kv->mutable_value()->set_double_value(value);
}
void add_bool(Attributes* attrs, std::string_view key, bool value) {
  auto* kv = attrs->Add();
  kv->set_key(std::string(key));
  kv->mutable_value()->set_bool_value(value);
}
template <typename Ints>
void add_int_array(Attributes* attrs, std::string_view key, const Ints& values) {
  auto* kv = attrs->Add();
  kv->set_key(std::string(key));
  auto* array = kv->mutable_value()->mutable_array_value();
  for (const auto v : values) array->add_values()->set_int_value(static_cast<int64_t>(v));
}

void add_pairs(const mcp::v1::EventBlock& b, uint32_t set, std::string_view prefix, Attributes* attrs) {
  if (set == 0 || set >= static_cast<uint32_t>(b.pair_sets_size())) return;
  const auto& pairs = b.pair_sets(static_cast<int>(set));
  const int n = std::min(pairs.keys_size(), pairs.values_size());
  for (int i = 0; i < n; ++i)
    add_string(attrs, std::string(prefix) + valid_utf8(str(b, pairs.keys(i))), str(b, pairs.values(i)));
}

// The attributes a span and a log record of this event share.
void add_event_attributes(const mcp::v1::EventBlock& b, const mcp::v1::CompactEvent& e, Attributes* attrs) {
  add_double(attrs, kAdjustedCountAttribute, 1.0 / threshold_to_probability(e.threshold()));
  add_string(attrs, "mcp.probe", str(b, e.probe()));
  const std::string_view kind = wire::kind_name(e.kind());
  add_string(attrs, "mcp.event.kind", kind.empty() ? "unknown" : kind);
  add_int(attrs, "thread.id", e.tid());
  add_int(attrs, "mcp.cpu", e.cpu());
  if (e.has_ret()) add_int(attrs, "mcp.return_value", e.ret());
  if (e.args_size() > 0) add_int_array(attrs, "mcp.args", e.args());
  if (e.event_id() != 0) add_int(attrs, "mcp.event.id", static_cast<int64_t>(e.event_id()));
  add_pairs(b, e.tags(), "mcp.tag.", attrs);
  add_pairs(b, e.attributes(), "mcp.attribute.", attrs);
  if (e.kind() == mcp::v1::EVENT_KIND_CUDA && e.has_cuda()) {
    const auto& c = e.cuda();
    add_string(attrs, "cuda.api", str(b, c.api()));
    if (c.kernel() != 0) add_string(attrs, "cuda.kernel.name", str(b, c.kernel()));
    if (c.grid_size() > 0) add_int_array(attrs, "cuda.grid", c.grid());
    if (c.block_size() > 0) add_int_array(attrs, "cuda.block", c.block());
    add_int(attrs, "cuda.stream", static_cast<int64_t>(c.stream()));
    if (c.shared_mem() != 0) add_int(attrs, "cuda.shared_memory", static_cast<int64_t>(c.shared_mem()));
    if (c.bytes() != 0) add_int(attrs, "cuda.bytes", static_cast<int64_t>(c.bytes()));
    if (c.memcpy_kind() != 0) add_int(attrs, "cuda.memcpy_kind", c.memcpy_kind());
    if (c.slow_mode()) add_bool(attrs, "cuda.slow_mode", true);
    add_bool(attrs, "cuda.launch", c.launch());
    if (c.graph() != 0) add_int(attrs, "cuda.graph", static_cast<int64_t>(c.graph()));
    if (c.has_graph_kernel_nodes()) add_int(attrs, "cuda.graph.kernel_nodes", c.graph_kernel_nodes());
  }
}

// Events sharing these share one Resource.
using ResourceKey = std::tuple<uint32_t /*service*/, uint32_t /*pid*/, uint32_t /*comm*/,
                               uint32_t /*container*/, uint32_t /*pod uid*/>;

void fill_resource(const mcp::v1::EventBlock& b, const mcp::v1::CompactEvent& e, const Origin& origin,
                   opentelemetry::proto::resource::v1::Resource* r) {
  auto* attrs = r->mutable_attributes();
  const std::string& comm = str(b, e.comm());
  const std::string& service = str(b, e.service());
  add_string(attrs, "service.name", service.empty() ? "unknown_service:" + comm : service);
  if (!origin.host_name.empty()) add_string(attrs, "host.name", origin.host_name);
  add_int(attrs, "process.pid", e.pid());
  if (!comm.empty()) add_string(attrs, "process.executable.name", comm);
  add_kubernetes_attributes(b, e, attrs);
  if (!origin.agent_id.empty()) add_string(attrs, "mcp.agent.id", origin.agent_id);
}

template <typename Resources, typename Scoped>
Scoped* scope_for(Resources* all, std::map<ResourceKey, Scoped*>& index, const ResourceKey& key,
                  const mcp::v1::EventBlock& b, const mcp::v1::CompactEvent& e, const Origin& origin) {
  auto it = index.find(key);
  if (it != index.end()) return it->second;
  auto* rs = all->Add();
  fill_resource(b, e, origin, rs->mutable_resource());
  Scoped* scoped = nullptr;
  if constexpr (std::is_same_v<Scoped, trace::ScopeSpans>) scoped = rs->add_scope_spans();
  else scoped = rs->add_scope_logs();
  scoped->mutable_scope()->set_name(std::string(kScopeName));
  return index.emplace(key, scoped).first->second;
}

}  // namespace

void add_kubernetes_attributes(const mcp::v1::EventBlock& b, const mcp::v1::CompactEvent& e,
                               Attributes* attrs) {
  if (const std::string& id = str(b, e.container_id()); !id.empty()) add_string(attrs, "container.id", id);
  if (const std::string& uid = str(b, e.pod_uid()); !uid.empty()) add_string(attrs, "k8s.pod.uid", uid);
  // Names (from the agent's pod watch) follow from the uid and the container id, already in the
  // resource's key.
  if (const std::string& name = str(b, e.pod_name()); !name.empty()) add_string(attrs, "k8s.pod.name", name);
  if (const std::string& ns = str(b, e.pod_namespace()); !ns.empty()) add_string(attrs, "k8s.namespace.name", ns);
  if (const std::string& c = str(b, e.container_name()); !c.empty()) add_string(attrs, "k8s.container.name", c);
}

bool marks_error(const mcp::v1::CompactEvent& e) {
  return mcp::marks_error(e.kind() == mcp::v1::EVENT_KIND_CUDA ? EventKind::kCuda : EventKind::kSyscall,
                          e.has_ret(), e.ret());
}

std::string tracestate_for(uint64_t threshold) { return "ot=th:" + otel_th(threshold); }

void Requests::clear() {
  traces.Clear();
  logs.Clear();
  spans = 0;
  log_records = 0;
}

// A span of one thread, for nesting the block's call trees.
struct ThreadSpan {
  uint64_t thread, start, end;  // thread: pid << 32 | tid
  trace::Span* span;
  bool own_trace_id;
};

// Each span's parent: the innermost span of its thread that encloses it (one stack per thread,
// spans by start, the longer first where two start together).
void nest(std::vector<ThreadSpan>& spans) {
  std::sort(spans.begin(), spans.end(), [](const ThreadSpan& a, const ThreadSpan& b) {
    return std::tie(a.thread, a.start, b.end) < std::tie(b.thread, b.start, a.end);
  });
  std::vector<const ThreadSpan*> open;
  for (const auto& s : spans) {
    while (!open.empty() && (open.back()->thread != s.thread || open.back()->end < s.end)) open.pop_back();
    if (!open.empty()) {
      trace::Span* parent = open.back()->span;
      if (!s.own_trace_id) *s.span->mutable_trace_id() = parent->trace_id();
      if (s.span->trace_id() == parent->trace_id()) *s.span->mutable_parent_span_id() = parent->span_id();
    }
    open.push_back(&s);
  }
}

void append_block(const mcp::v1::EventBlock& block, const Origin& origin, Requests* out) {
  std::vector<ThreadSpan> thread_spans;
  std::map<ResourceKey, trace::ScopeSpans*> span_scopes;
  std::map<ResourceKey, logs::ScopeLogs*> log_scopes;
  for (const auto& e : block.events()) {
    const ResourceKey key{e.service(), e.pid(), e.comm(), e.container_id(), e.pod_uid()};
    const bool error = marks_error(e);
    const std::string& probe = str(block, e.probe());
    if (e.has_duration()) {
      auto* scope = scope_for(out->traces.mutable_resource_spans(), span_scopes, key, block, e, origin);
      auto* span = scope->add_spans();
      const bool consistent = e.th() != 0 && has_trace_id(e);
      std::string* trace_id = span->mutable_trace_id();
      if (has_trace_id(e)) {
        put_be64(trace_id, e.trace_id_high());
        put_be64(trace_id, e.trace_id());
      } else {
        const uint64_t seed = nonzero_id(e.event_id());
        put_be64(trace_id, mix64(seed));
        put_be64(trace_id, mix64(~seed) | 1);
      }
      put_be64(span->mutable_span_id(), nonzero_id(e.event_id()));
      if (consistent) span->set_trace_state(tracestate_for(e.threshold()));
      span->set_name(valid_utf8(probe));
      span->set_kind(trace::Span::SPAN_KIND_INTERNAL);
      // A timed call's ts is its entry (the kernel stamps the entry and measures to the
      // return), so the span is [entry, entry + duration]: nested calls nest.
      const uint64_t start = e.ts_ns();
      span->set_start_time_unix_nano(start);
      span->set_end_time_unix_nano(start + std::min(e.duration_ns(), UINT64_MAX - start));
      thread_spans.push_back({(uint64_t{e.pid()} << 32) | e.tid(), start, span->end_time_unix_nano(), span, has_trace_id(e)});
      add_event_attributes(block, e, span->mutable_attributes());
      if (error) span->mutable_status()->set_code(trace::Status::STATUS_CODE_ERROR);
      ++out->spans;
    } else {
      auto* scope = scope_for(out->logs.mutable_resource_logs(), log_scopes, key, block, e, origin);
      auto* record = scope->add_log_records();
      record->set_time_unix_nano(e.ts_ns());
      record->set_observed_time_unix_nano(e.ts_ns());
      record->set_severity_number(error ? logs::SEVERITY_NUMBER_ERROR : logs::SEVERITY_NUMBER_INFO);
      record->set_severity_text(error ? "ERROR" : "INFO");
      record->mutable_body()->set_string_value(valid_utf8(probe));
      if (has_trace_id(e)) {
        put_be64(record->mutable_trace_id(), e.trace_id_high());
        put_be64(record->mutable_trace_id(), e.trace_id());
      }
      add_event_attributes(block, e, record->mutable_attributes());
      // A log record has no trace_state: the threshold travels as an attribute.
      if (e.th() != 0) add_string(record->mutable_attributes(), "sampling.th", otel_th(e.threshold()));
      ++out->log_records;
    }
  }
  nest(thread_spans);
}

void append_audit(const AuditEntry& entry, const Origin& origin, Requests* out) {
  auto* rl = out->logs.add_resource_logs();
  auto* attrs = rl->mutable_resource()->mutable_attributes();
  add_string(attrs, "service.name", "mcp-agent");
  if (!origin.host_name.empty()) add_string(attrs, "host.name", origin.host_name);
  if (!origin.agent_id.empty()) add_string(attrs, "mcp.agent.id", origin.agent_id);
  auto* scope = rl->add_scope_logs();
  scope->mutable_scope()->set_name(std::string(kAuditScopeName));
  auto* record = scope->add_log_records();
  record->set_time_unix_nano(entry.ts_ns);
  record->set_observed_time_unix_nano(entry.ts_ns);
  record->set_severity_number(logs::SEVERITY_NUMBER_INFO);
  record->set_severity_text("INFO");
  record->mutable_body()->set_string_value(valid_utf8(entry.line));
  add_string(record->mutable_attributes(), "event.name", "mcp.audit");
  add_int(record->mutable_attributes(), "mcp.audit.seq", static_cast<int64_t>(entry.seq));
  add_string(record->mutable_attributes(), "mcp.audit.hash", entry.hash);
  ++out->log_records;
}

}  // namespace mcp::otlp
