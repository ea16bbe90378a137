#include "cuda/cuda_attach.h"

namespace mcp::cuda {

std::vector<AttachedCudaProbe> attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                                const loader::ProbeConfig& base, KernelSymbolizer& symbolizer) {
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
    config.cuda_api = t.api->api;
    config.vma_arg = t.api->vma_arg;
    config.entry_deref_arg = t.api->entry_deref_arg;
    config.ret_deref_arg = t.api->ret_deref_arg;
    config.name_arg = t.api->name_arg;
    config.cuda_flags = t.fold_nested ? MCP_CUDA_CFG_FOLD_NESTED : 0;
    out.push_back({session.add_cuda_probe(t.target, pid, config, t.api->internal), t.api});
  }
  undo.done = true;
  return out;
}

}  // namespace mcp::cuda
