// Test support: an Event as a v1 wire Sample, every field of the JSON event, as an agent
// before the compact format (forward/event_block.h) sent it. Tests and benches use it to
// stand in for old agents and old brokers; the agent itself sends compact blocks.
// Header-only; link mcp_proto and mcp_common.
#pragma once
#include "common/event.h"
#include "common/utf8.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::test {

// Strings go through valid_utf8 as in the agent's encoders: one invalid byte in a proto3
// string makes the whole message unparseable.
inline void to_sample(const Event& e, mcp::v1::Sample* s) {
  s->set_ts_ns(e.ts_ns);
  s->set_ktime_ns(e.ktime_ns);
  s->set_hlc(e.hlc);
  s->set_kind(std::string(to_string(e.kind)));
  s->set_probe(valid_utf8(e.probe));
  s->set_probe_id(e.probe_id);
  s->set_pid(e.pid);
  s->set_tid(e.tid);
  s->set_cpu(e.cpu);
  s->set_cgroup_id(e.cgroup_id);
  s->set_comm(valid_utf8(e.comm_view()));
  s->set_container_id(valid_utf8(e.container_id));
  s->set_pod_uid(valid_utf8(e.pod_uid));
  s->set_pod_name(valid_utf8(e.pod));
  s->set_pod_namespace(valid_utf8(e.pod_namespace));
  s->set_container_name(valid_utf8(e.container));
  for (const auto& [k, v] : e.pod_labels) (*s->mutable_pod_labels())[valid_utf8(k)] = valid_utf8(v);
  s->set_service(valid_utf8(e.service));
  for (const auto& [k, v] : e.tags) (*s->mutable_tags())[valid_utf8(k)] = valid_utf8(v);
  for (uint8_t i = 0; i < e.nargs && i < e.args.size(); ++i) s->add_args(e.args[i]);
  s->set_has_ret(e.has_ret);
  s->set_ret(e.ret);
  s->set_has_duration(e.has_duration);
  s->set_duration_ns(e.duration_ns);
  s->set_threshold(e.threshold);
  if (e.consistent) s->set_th(otel_th(e.threshold));
  s->set_trace_id(e.trace_id_lo);
  s->set_trace_id_high(e.trace_id_hi);
  for (const auto& [k, v] : e.attributes) (*s->mutable_attributes())[valid_utf8(k)] = valid_utf8(v);
  if (e.kind == EventKind::kCuda) {
    auto* c = s->mutable_cuda();
    c->set_api(valid_utf8(e.cuda.api));
    c->set_kernel(valid_utf8(e.cuda.kernel));
    for (uint32_t g : e.cuda.grid) c->add_grid(g);
    for (uint32_t b : e.cuda.block) c->add_block(b);
    c->set_shared_mem(e.cuda.shared_mem);
    c->set_stream(e.cuda.stream);
    c->set_bytes(e.cuda.bytes);
    c->set_memcpy_kind(e.cuda.memcpy_kind);
    c->set_slow_mode(e.cuda.slow_mode);
    c->set_launch(e.cuda.launch);
    for (uint64_t pc : e.cuda.user_stack) c->add_user_stack(pc);
    c->set_graph(e.cuda.graph);
    if (e.cuda.graph_kernel_nodes) c->set_graph_kernel_nodes(*e.cuda.graph_kernel_nodes);
  }
}

}  // namespace mcp::test
