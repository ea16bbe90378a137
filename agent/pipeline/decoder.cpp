#include "pipeline/decoder.h"

#include <algorithm>
#include <cstring>

#include "mcp_abi.h"

namespace mcp::pipeline {

static_assert(sizeof(mcp_event_header) == 64 && sizeof(mcp_call_event) == 128,
              "userspace sees the same ABI as the BPF programs");

bool decode_record(const void* data, size_t size, const ProbeNameLookup& names, Event& out) {
  if (size < sizeof(mcp_event_header)) return false;
  mcp_event_header h;
  std::memcpy(&h, data, sizeof(h));
  // A kept event always has a non-zero threshold; 0 would mean an infinite weight.
  if (h.size > size || h.threshold == 0) return false;
  // The caller reuses one Event: later stages' enrichment must not leak across records.
  out.ts_ns = 0;
  out.hlc = 0;
  out.service.clear();
  out.container_id.clear();
  out.tags.clear();
  out.attributes.clear();
  out.ktime_ns = h.ktime_ns;
  out.cgroup_id = h.cgroup_id;
  out.threshold = h.threshold;
  out.pid = h.pid;
  out.tid = h.tid;
  out.probe_id = h.probe_id;
  out.cpu = h.cpu;
  std::memcpy(out.comm.data(), h.comm, sizeof(h.comm));
  out.comm.back() = '\0';
  out.has_ret = h.flags & MCP_EV_HAS_RET;
  out.has_duration = h.flags & MCP_EV_HAS_DURATION;
  switch (h.kind) {
    case MCP_KIND_UPROBE:
    case MCP_KIND_URETPROBE:
    case MCP_KIND_SYSCALL: {
      if (size < sizeof(mcp_call_event)) return false;
      mcp_call_event e;
      std::memcpy(&e, data, sizeof(e));
      out.kind = h.kind == MCP_KIND_UPROBE ? EventKind::kUprobe
                 : h.kind == MCP_KIND_URETPROBE ? EventKind::kUretprobe
                                                : EventKind::kSyscall;
      std::memcpy(out.args.data(), e.args, sizeof(e.args));
      out.ret = e.ret;
      out.duration_ns = e.duration_ns;
      break;
    }
    default:
      return false;
  }
  const ProbeRef ref = names(h.probe_id);
  out.probe = ref.name;
  out.nargs = h.kind == MCP_KIND_SYSCALL ? std::min<uint8_t>(ref.nargs, MCP_MAX_ARGS) : MCP_MAX_ARGS;
  return true;
}

}  // namespace mcp::pipeline
