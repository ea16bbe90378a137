// Attaching the CUDA API probes of one file (runtime, driver or a binary with
// the static runtime): shared by `mcp-agent trace --cuda` and the daemon.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_targets.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/bpf_session.h"

namespace mcp::cuda {

struct AttachedCudaProbe {
  uint32_t id;
  const ApiSpec* api;
};

// A file registered in cuda_runtime_files while its runtime launch probes are attached;
// erased when destroyed (then the driver launches it makes count as launches again).
class RuntimeFileMark {
 public:
  RuntimeFileMark() = default;
  RuntimeFileMark(loader::BpfSession& session, const mcp_file_key& key, uint8_t kind);
  RuntimeFileMark(RuntimeFileMark&& o) noexcept : session_(std::exchange(o.session_, nullptr)), key_(o.key_) {}
  RuntimeFileMark& operator=(RuntimeFileMark&& o) noexcept;
  RuntimeFileMark(const RuntimeFileMark&) = delete;
  RuntimeFileMark& operator=(const RuntimeFileMark&) = delete;
  ~RuntimeFileMark() { reset(); }
  void reset();

 private:
  loader::BpfSession* session_ = nullptr;
  mcp_file_key key_{};
};

struct AttachedCudaFile {
  std::vector<AttachedCudaProbe> probes;
  RuntimeFileMark runtime;  // set when the file holds runtime launch APIs
};

// Probes every API present in `file`, with `base` sampling; the bookkeeping
// probes (__cudaGetKernel, ...) always keep everything. Registers the file with the
// symboliser. Without `launch_latency` (--cuda-latency, or slow-launch detection,
// which needs it) a launch API is reported at its entry: one trap a launch, no
// ret and no duration. Other APIs are always timed entry to return.
// Each launch is one event: a file with runtime launch APIs is registered as a runtime
// (a libcudart* library, or a file that also holds application code: the static
// runtime), and the driver launch APIs skip calls a runtime makes for a launch it
// reported. `key` is the file as the kernel names it (default: by stat of `file`).
// All or nothing: throws mcp::Error and leaves nothing attached on failure.
AttachedCudaFile attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                  const loader::ProbeConfig& base, KernelSymbolizer& symbolizer, bool launch_latency,
                                  std::optional<mcp_file_key> key = std::nullopt);

}  // namespace mcp::cuda
