#include "pipeline/decoder.h"

#include <algorithm>
#include <cstring>

namespace mcp::pipeline {
namespace {

std::array<uint32_t, 3> dim3_from_regs(uint64_t xy, uint64_t z) {
  return {static_cast<uint32_t>(xy), static_cast<uint32_t>(xy >> 32), static_cast<uint32_t>(z)};
}

// The fields both CUDA record kinds share (registers, stack arguments, deref, code
// place), decoded per API; the bookkeeping APIs' names come only in mcp_cuda_event.
template <class Record>
bool decode_cuda_fields(const Record& c, CudaInfo& out) {
  out.code_inode = c.code_inode;
  out.code_offset = c.code_file_offset;
  out.slow_mode = c.hdr.flags & MCP_EV_SLOW_MODE;
  out.api_id = c.api;
  out.launch = is_launch_api(c.api);
  switch (c.api) {
    case MCP_CUDA_LAUNCH:
    case MCP_CUDA_LAUNCH_HANDLE:
      out.function = c.regs[0];
      out.grid = dim3_from_regs(c.regs[1], c.regs[2]);
      out.block = dim3_from_regs(c.regs[3], c.regs[4]);
      out.shared_mem = c.stack_args[0];
      out.stream = c.stack_args[1];
      break;
    case MCP_CUDA_LAUNCH_EXC: {
      // cudaLaunchConfig_t: dim3 gridDim, dim3 blockDim, size_t dynamicSmemBytes, cudaStream_t stream
      uint32_t dims[6];
      std::memcpy(dims, c.deref, sizeof(dims));
      out.function = c.regs[1];
      out.grid = {dims[0], dims[1], dims[2]};
      out.block = {dims[3], dims[4], dims[5]};
      out.shared_mem = c.deref[3];
      out.stream = c.deref[4];
      break;
    }
    case MCP_CUDA_CU_LAUNCH:
      out.function = c.regs[0];
      out.grid = {static_cast<uint32_t>(c.regs[1]), static_cast<uint32_t>(c.regs[2]), static_cast<uint32_t>(c.regs[3])};
      out.block = {static_cast<uint32_t>(c.regs[4]), static_cast<uint32_t>(c.regs[5]),
                   static_cast<uint32_t>(c.stack_args[0])};
      out.shared_mem = static_cast<uint32_t>(c.stack_args[1]);
      out.stream = c.stack_args[2];
      break;
    case MCP_CUDA_CU_LAUNCH_EX: {
      // CUlaunchConfig: gridDimX..Z, blockDimX..Z, sharedMemBytes (unsigned ints), CUstream at 32
      uint32_t words[7];
      std::memcpy(words, c.deref, sizeof(words));
      out.function = c.regs[1];
      out.grid = {words[0], words[1], words[2]};
      out.block = {words[3], words[4], words[5]};
      out.shared_mem = words[6];
      out.stream = c.deref[4];
      break;
    }
    case MCP_CUDA_MEMCPY:
    case MCP_CUDA_MEMCPY_ASYNC:
      out.bytes = c.regs[2];
      out.memcpy_kind = static_cast<uint32_t>(c.regs[3]);
      if (c.api == MCP_CUDA_MEMCPY_ASYNC) out.stream = c.regs[4];
      break;
    case MCP_CUDA_MALLOC:
      out.bytes = c.regs[1];
      out.function = c.deref[0];  // the device pointer it returned
      break;
    case MCP_CUDA_FREE:
      out.function = c.regs[0];
      break;
    case MCP_CUDA_STREAM_SYNC:
      out.stream = c.regs[0];
      break;
    case MCP_CUDA_GRAPH_LAUNCH:
      out.function = c.regs[0];  // the executable graph
      out.stream = c.regs[1];
      break;
    case MCP_CUDA_DEVICE_SYNC:
      break;
    case MCP_CUDA_GET_KERNEL:
      out.internal = true;
      out.function = c.deref[0];  // the handle it wrote; code_* locate the host function
      break;
    case MCP_CUDA_GET_FUNCTION:
      out.internal = true;
      out.function = c.deref[0];  // the CUfunction / CUkernel it wrote
      if constexpr (requires { c.name; }) out.kernel.assign(c.name, strnlen(c.name, sizeof(c.name)));
      else return false;  // a name registration always comes as a full record
      break;
    case MCP_CUDA_KERNEL_FUNCTION:
      out.internal = true;
      out.function = c.deref[0];  // the CUfunction it wrote for the CUkernel in rsi (args[1])
      break;
    case MCP_CUDA_GRAPH_NEW:
    case MCP_CUDA_GRAPH_CAPTURED:
      out.internal = true;
      out.graph = c.deref[0];
      break;
    case MCP_CUDA_GRAPH_ADD_KERNEL:
      out.internal = true;
      out.graph = c.regs[1];
      break;
    case MCP_CUDA_GRAPH_INSTANTIATE:
      out.internal = true;
      out.function = c.deref[0];  // the executable graph
      out.graph = c.regs[1];
      break;
    default:
      return false;
  }
  return true;
}

// The kernel's counts are clamped to the arrays: a bad record cannot make the agent read past them.
void decode_stack(const mcp_stack& s, CapturedStack& out) {
  const size_t user = std::min<size_t>(s.user_frames, MCP_MAX_STACK_DEPTH);
  const size_t kernel = std::min<size_t>(s.kernel_frames, MCP_MAX_STACK_DEPTH);
  out.kernel.assign(s.kernel_ips, s.kernel_ips + kernel);
  out.user.assign(s.user_ips, s.user_ips + user);
  out.user_ids.resize(user);
  for (size_t i = 0; i < user; i++) {
    auto& f = out.user_ids[i];
    f.valid = s.user_ids[i].status == MCP_BUILD_ID_VALID;
    std::memcpy(f.build_id.data(), s.user_ids[i].build_id, f.build_id.size());
    f.file_offset = f.valid ? s.user_ids[i].offset_or_ip : 0;
  }
}

// The string arguments of a USDT record as attributes "argN" (N the argument), in argument
// order; an argument whose read failed (a bad address) has none: its value is still in args.
void decode_usdt_strings(const mcp_usdt_event& e, std::vector<std::pair<std::string, std::string>>& out) {
  int slot = 0;
  for (int i = 0; i < MCP_MAX_ARGS && slot < MCP_MAX_STR_ARGS; i++) {
    if (!(e.str_args & (1u << i))) continue;
    const char* s = e.str[slot++];
    if (e.str_ok & (1u << i)) out.emplace_back(string_arg_attribute(i), std::string(s, strnlen(s, MCP_STR_ARG_LEN)));
  }
}

}  // namespace

bool is_launch_api(uint32_t api) {
  return api == MCP_CUDA_LAUNCH || api == MCP_CUDA_LAUNCH_HANDLE || api == MCP_CUDA_LAUNCH_EXC ||
         api == MCP_CUDA_CU_LAUNCH || api == MCP_CUDA_CU_LAUNCH_EX || api == MCP_CUDA_GRAPH_LAUNCH;
}

bool decode_cuda(const mcp_cuda_event& c, CudaInfo& out) {
  out = CudaInfo{};
  if (c.stack_depth) out.user_stack.assign(c.user_stack, c.user_stack + std::min<uint32_t>(c.stack_depth, MCP_MAX_STACK_DEPTH));
  return decode_cuda_fields(c, out);
}

bool decode_cuda_launch(const mcp_cuda_launch_event& c, CudaInfo& out) {
  out = CudaInfo{};
  if (!is_launch_api(c.api)) return false;  // only launches are reported at entry
  return decode_cuda_fields(c, out);
}

static_assert(sizeof(mcp_event_header) == 64 && sizeof(mcp_call_event) == 144 &&
                  sizeof(mcp_cuda_launch_event) == 200,
              "userspace sees the same ABI as the BPF programs");

// The kernel fills trace_id only for a consistent decision; anything else is not one.
static void set_trace_id(Event& out, const __u64 (&id)[2]) {
  out.trace_id_hi = out.consistent ? id[0] : 0;
  out.trace_id_lo = out.consistent ? id[1] : 0;
}

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
  out.pod_uid.clear();
  out.pod.clear();
  out.pod_namespace.clear();
  out.container.clear();
  out.pod_labels.clear();
  out.tags.clear();
  out.attributes.clear();
  out.captured_stack.clear();
  out.stack.clear();
  out.ktime_ns = h.ktime_ns;
  out.cgroup_id = h.cgroup_id;
  out.threshold = h.threshold;
  out.consistent = h.flags & MCP_EV_CONSISTENT;
  out.windowed = h.flags & MCP_EV_WINDOWED;
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
      set_trace_id(out, e.trace_id);
      break;
    }
    case MCP_KIND_USDT: {
      if (size < sizeof(mcp_usdt_event)) return false;
      mcp_usdt_event e;
      std::memcpy(&e, data, sizeof(e));
      out.kind = EventKind::kUsdt;
      std::memcpy(out.args.data(), e.call.args, sizeof(e.call.args));
      out.ret = 0;
      out.duration_ns = 0;
      set_trace_id(out, e.call.trace_id);
      out.nargs = std::min<uint8_t>(e.nargs, MCP_MAX_ARGS);
      decode_usdt_strings(e, out.attributes);
      break;
    }
    case MCP_KIND_CUDA: {
      if (size < sizeof(mcp_cuda_event)) return false;
      mcp_cuda_event c;
      std::memcpy(&c, data, sizeof(c));
      out.kind = EventKind::kCuda;
      out.nargs = MCP_MAX_ARGS;
      std::memcpy(out.args.data(), c.regs, sizeof(c.regs));
      out.ret = c.ret;
      out.duration_ns = c.duration_ns;
      out.trace_id_hi = out.trace_id_lo = 0;  // CUDA probes never decide on a trace id
      if (!decode_cuda(c, out.cuda)) return false;
      break;
    }
    case MCP_KIND_CUDA_LAUNCH: {
      if (size < sizeof(mcp_cuda_launch_event)) return false;
      mcp_cuda_launch_event c;
      std::memcpy(&c, data, sizeof(c));
      out.kind = EventKind::kCuda;
      std::memcpy(out.args.data(), c.regs, sizeof(c.regs));
      out.ret = 0;           // reported at entry: no return value, no duration (flags clear)
      out.duration_ns = 0;
      out.has_ret = out.has_duration = false;
      out.trace_id_hi = out.trace_id_lo = 0;
      if (!decode_cuda_launch(c, out.cuda)) return false;
      break;
    }
    default:
      return false;
  }
  if ((h.flags & MCP_EV_HAS_STACK) && (h.kind == MCP_KIND_USDT || h.kind == MCP_KIND_UPROBE ||
                                       h.kind == MCP_KIND_URETPROBE || h.kind == MCP_KIND_SYSCALL)) {
    const size_t base = h.kind == MCP_KIND_USDT ? sizeof(mcp_usdt_event) : sizeof(mcp_call_event);
    if (size < base + sizeof(mcp_stack)) return false;
    mcp_stack s;
    std::memcpy(&s, static_cast<const char*>(data) + base, sizeof(s));
    decode_stack(s, out.captured_stack);
  }
  const ProbeRef ref = names(h.probe_id);
  out.probe = ref.name;
  out.args_declared = true;
  if (h.kind == MCP_KIND_SYSCALL || h.kind == MCP_KIND_UPROBE || h.kind == MCP_KIND_URETPROBE) {
    out.nargs = std::min<uint8_t>(ref.nargs, MCP_MAX_ARGS);
    out.args_declared = ref.args_declared;
  } else if (h.kind != MCP_KIND_USDT) {
    out.nargs = MCP_MAX_ARGS;  // a USDT probe's own count, above
  }
  return true;
}

}  // namespace mcp::pipeline
