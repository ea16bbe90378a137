// Attaching the CUDA API probes of one file (runtime, driver or a binary with
// the static runtime): shared by `mcp-agent trace --cuda` and the daemon.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_targets.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/bpf_session.h"

namespace mcp::cuda {

struct AttachedCudaProbe {
  uint32_t id;
  const ApiSpec* api;
};

// Probes every API present in `file`, with `base` sampling; the bookkeeping
// probes (__cudaGetKernel, ...) always keep everything. Registers the file with the
// symboliser. Without `launch_latency` (--cuda-latency, or slow-launch detection,
// which needs it) a launch API is reported at its entry: one trap a launch, no
// ret and no duration. Other APIs are always timed entry to return.
std::vector<AttachedCudaProbe> attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                                const loader::ProbeConfig& base, KernelSymbolizer& symbolizer,
                                                bool launch_latency);

}  // namespace mcp::cuda
