// OTLP mapping: our kept events (one compact EventBlock, proto/mcp/v1/sampling.proto) as
// OpenTelemetry spans and log records (the official protos, pinned in scripts/setup).
//
// Contract:
// - An event with a duration (has_duration: uretprobe, syscall with latency, timed CUDA API
//   calls and launches) is a span [ts_ns, ts_ns + duration_ns] (a timed call's ts is its
//   entry); any other event is a log record at ts_ns (body: the probe name).
// - Call trees: within one block, a span of a thread that lies inside another span of the same
//   thread is that span's child (parent_span_id, the innermost enclosing one) and, unless it
//   carries a trace id of its own, shares its trace id; calls of one tree split across blocks
//   stay separate traces.
// - Resource (OTel semantic conventions): service.name (the event's service, else
//   "unknown_service:<comm>"), host.name (the shipping agent's host), process.pid,
//   process.executable.name (the task comm), container.id and k8s.pod.uid when known;
//   mcp.agent.id.
//   Events of one block sharing these are grouped under one resource.
// - Every record carries kAdjustedCountAttribute = 1/p (p = threshold / 2^64; 1 for keep-all),
//   so a backend summing it over records estimates the number of calls.
// - A span whose decision used the trace id (CompactEvent.th set) and that carries that trace id
//   (trace_id_high, trace_id not both 0: the W3C id's two big-endian halves) gets that id as
//   its trace_id (its low 56 bits are OTel's randomness R) and trace_state "ot=th:<hex>",
//   with T = 2^56 - (threshold >> 8) spelled by mcp::otel_th ("0": keep-all). A log record
//   carries the trace id when known, and th (when set) as the attribute sampling.th.
//   Without the trace id the span gets an id derived from event_id and no th (a made-up id
//   says nothing about R). Span ids come from event_id, so a replayed event keeps its span id.
// - Errors (marks_error: a syscall or function returning < 0, a CUDA call returning non-zero)
//   set span status ERROR and log severity ERROR.
// - CUDA events carry cuda.api, cuda.kernel.name, cuda.grid / cuda.block ([x, y, z]),
//   cuda.launch, cuda.stream, cuda.shared_memory, cuda.bytes, cuda.memcpy_kind, cuda.slow_mode,
//   cuda.graph, cuda.graph.kernel_nodes (graph launches, the count only when known).
// - Strings come from traced processes: each is repaired to valid UTF-8 (common/utf8.h), so
//   the requests always serialize to valid OTLP. Indices out of range read as "" (never crash).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "mcp/v1/sampling.pb.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace mcp::otlp {

// The weight of a record: how many calls it stands for (1/p).
inline constexpr std::string_view kAdjustedCountAttribute = "sampling.adjusted_count";
inline constexpr std::string_view kScopeName = "mcp-sampling";

// Who shipped a block (the broker knows it from the Publish stream's hello).
struct Origin {
  std::string agent_id;
  std::string host_name;
};

struct Requests {
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest traces;
  opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest logs;
  uint64_t spans = 0;
  uint64_t log_records = 0;
  uint64_t records() const { return spans + log_records; }
  void clear();
};

// Appends one block's events to `out`.
void append_block(const mcp::v1::EventBlock& block, const Origin& origin, Requests* out);

// One record of the compliance audit trail (agent/audit/audit_log.h), as written.
struct AuditEntry {
  uint64_t seq = 0;
  uint64_t ts_ns = 0;    // the audited event's time
  std::string hash;      // the record's own hash (its chain link)
  std::string line;      // the JSON line, without its newline
};
inline constexpr std::string_view kAuditScopeName = "mcp-sampling.audit";
// Appends an audit record as a log record: time ts_ns, body the JSON line as the trail holds it
// (so a backend keeps what `mcp-agent audit verify` checks), attributes event.name "mcp.audit",
// mcp.audit.seq and mcp.audit.hash; resource service.name "mcp-agent", host.name and
// mcp.agent.id of `origin`; scope kAuditScopeName. Counted in log_records.
void append_audit(const AuditEntry& entry, const Origin& origin, Requests* out);

// "ot=th:<hex>" for acceptance threshold A (see the contract above).
std::string tracestate_for(uint64_t threshold);

// The Kubernetes part of an event's resource: container.id and k8s.pod.uid when the event
// carries them. Pod name and namespace (k8s.pod.name, k8s.namespace.name) join here once
// events carry them.
void add_kubernetes_attributes(
    const mcp::v1::EventBlock& block, const mcp::v1::CompactEvent& event,
    google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>* attributes);

// mcp::marks_error (common/event.h) for a wire event.
bool marks_error(const mcp::v1::CompactEvent& e);

}  // namespace mcp::otlp
