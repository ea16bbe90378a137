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
// probe (__cudaGetKernel) always keeps everything. Registers the file with the
// symboliser.
std::vector<AttachedCudaProbe> attach_cuda_file(loader::BpfSession& session, const std::string& file, pid_t pid,
                                                const loader::ProbeConfig& base, KernelSymbolizer& symbolizer);

}  // namespace mcp::cuda
