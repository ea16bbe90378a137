#include "cuda/cuda_attach.h"

#include <cstdlib>
#include <string>

#include "common/error.h"
#include "mcp_abi.h"
#include "pipeline/decoder.h"

namespace mcp::cuda {
namespace {

}  // namespace

RuntimeFileMark::RuntimeFileMark(loader::BpfSession& session, const mcp_file_key& key, uint8_t kind)
    : session_(&session), key_(key) {
  session.set_runtime_file(key, kind);
}

RuntimeFileMark& RuntimeFileMark::operator=(RuntimeFileMark&& o) noexcept {
  if (this != &o) {
    reset();
    session_ = std::exchange(o.session_, nullptr);
    key_ = o.key_;
  }
  return *this;
}

void RuntimeFileMark::reset() {
  if (session_) std::exchange(session_, nullptr)->erase_runtime_file(key_);
}

AttachedCudaFile attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                  const loader::ProbeConfig& base, KernelSymbolizer& symbolizer, bool launch_latency,
                                  std::optional<mcp_file_key> key) {
  symbolizer.add_file(file);
  const auto targets = probe_targets_in(file);
  bool runtime = false;
  for (const auto& t : targets) runtime = runtime || is_runtime_launch(t.api->api);
  // A runtime library makes driver calls only for the runtime; in a file with the static
  // runtime the application may call the driver too, so there only a launch in progress
  // on the thread (marked at its entry) makes a driver launch nested.
  const bool shared_runtime = is_runtime_library(file);
  const char* windows_env = getenv("MCP_CUDA_WINDOWS");
  const bool cuda_windows = windows_env && std::string(windows_env) == "on";
  AttachedCudaFile out;
  if (runtime) {
    if (!key) key = kernel_file_key(file);
    if (!key) throw runtime_error("cannot stat " + file);
    out.runtime = RuntimeFileMark(session, *key, shared_runtime ? MCP_RUNTIME_SHARED : MCP_RUNTIME_STATIC);
  }
  // All or nothing: a failure half-way detaches the APIs already attached.
  struct Undo {
    loader::BpfSession& session;
    std::vector<AttachedCudaProbe>& out;
    bool done = false;
    ~Undo() {
      if (!done)
        for (const auto& p : out) session.remove_probe(p.id);
    }
  } undo{session, out.probes};
  for (const auto& t : targets) {
    loader::ProbeConfig config = base;
    if (t.api->internal) config.threshold = UINT64_MAX;  // every handle registration is needed
    config.trace_id_arg = -1;  // API arguments are no trace ids: a random draw (the kernel agrees)
    config.cuda_api = t.api->api;
    config.vma_arg = t.api->vma_arg;
    config.entry_deref_arg = t.api->entry_deref_arg;
    config.ret_deref_arg = t.api->ret_deref_arg;
    config.name_arg = t.api->name_arg;
    config.cuda_flags = t.fold_nested ? MCP_CUDA_CFG_FOLD_NESTED : 0;
    if (is_driver_launch(t.api->api)) config.cuda_flags |= MCP_CUDA_CFG_DRIVER_LAUNCH;
    if (is_runtime_launch(t.api->api) && !shared_runtime) config.cuda_flags |= MCP_CUDA_CFG_MARK_THREAD;
    // A nested launch API is folded by an owner its return clears: those stay timed.
    if (!launch_latency && pipeline::is_launch_api(t.api->api) && !t.fold_nested) config.cuda_flags |= MCP_CUDA_CFG_AT_ENTRY;
    // Launches sample calls unless MCP_CUDA_WINDOWS=on: in PyTorch on an H200 windowed
    // launches came out 8-18% low at rate 0.01 (docs/performance.md, "Launches in windows on the H200"), while a launch's
    // trap there is ~0.25 us of a 6-8 us launch. Only launches reported at entry can be
    // windowed: a timed launch feeds slow-launch detection, and a marked runtime launch must
    // be seen whenever its driver call is.
    config.windowed = base.windowed && cuda_windows && (config.cuda_flags & MCP_CUDA_CFG_AT_ENTRY) &&
                      !(config.cuda_flags & MCP_CUDA_CFG_MARK_THREAD);
    out.probes.push_back({session.add_cuda_probe(t.target, pid, config, t.api->internal), t.api});
  }
  undo.done = true;
  return out;
}

}  // namespace mcp::cuda
