#include "cuda/cuda_attach.h"

#include "mcp_abi.h"

namespace mcp::cuda {
namespace {

// The launch APIs an application calls (graph launches included).
bool is_reported_launch(uint8_t api) {
  return api == MCP_CUDA_LAUNCH || api == MCP_CUDA_LAUNCH_HANDLE || api == MCP_CUDA_LAUNCH_EXC ||
         api == MCP_CUDA_CU_LAUNCH || api == MCP_CUDA_CU_LAUNCH_EX || api == MCP_CUDA_GRAPH_LAUNCH;
}

}  // namespace

std::vector<AttachedCudaProbe> attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                                const loader::ProbeConfig& base, KernelSymbolizer& symbolizer,
                                                bool launch_latency) {
  symbolizer.add_file(file);
  std::vector<AttachedCudaProbe> out;
  // All or nothing: a failure half-way detaches the APIs already attached.
  struct Undo {
    loader::BpfSession& session;
    std::vector<AttachedCudaProbe>& out;
    bool done = false;
    ~Undo() {
      if (!done)
        for (const auto& p : out) session.remove_probe(p.id);
    }
  } undo{session, out};
  for (const auto& t : probe_targets_in(file)) {
    loader::ProbeConfig config = base;
    if (t.api->internal) config.threshold = UINT64_MAX;  // every handle registration is needed
    config.trace_id_arg = -1;  // API arguments are no trace ids: a random draw (the kernel agrees)
    config.cuda_api = t.api->api;
    config.vma_arg = t.api->vma_arg;
    config.entry_deref_arg = t.api->entry_deref_arg;
    config.ret_deref_arg = t.api->ret_deref_arg;
    config.name_arg = t.api->name_arg;
    config.cuda_flags = t.fold_nested ? MCP_CUDA_CFG_FOLD_NESTED : 0;
    // A nested launch API is folded by an owner its return clears: those stay timed.
    if (!launch_latency && is_reported_launch(t.api->api) && !t.fold_nested) config.cuda_flags |= MCP_CUDA_CFG_AT_ENTRY;
    out.push_back({session.add_cuda_probe(t.target, pid, config, t.api->internal), t.api});
  }
  undo.done = true;
  return out;
}

}  // namespace mcp::cuda
