// CUDA targets: which files hold the CUDA runtime or driver for a traced
// process (shared libcudart/libcuda, or the executable itself when it links the
// static runtime, nvcc's default), and which API functions to probe in each,
// with how the BPF side must read each API's arguments (bpf/mcp_abi.h).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/target_resolver.h"

namespace mcp::cuda {

struct ApiSpec {
  const char* symbol;   // as exported, e.g. "__cudaLaunchKernel"
  const char* display;  // what users see in cuda.api, e.g. "cudaLaunchKernel"
  uint8_t api;          // enum mcp_cuda_api
  uint8_t vma_arg;      // 1-based argument holding a code address, 0: none
  uint8_t entry_deref_arg;
  uint8_t ret_deref_arg;
  uint8_t name_arg;     // 1-based argument holding a name string copied at return, 0: none
  bool internal;        // bookkeeping (handle names, graph shapes), never shown
};

const std::vector<ApiSpec>& api_specs();

struct ProbeTarget {
  loader::UprobeTarget target;
  const ApiSpec* api;
  bool fold_nested = false;  // a launch API of a file where one probed launch API calls another
};

// The API functions present in `file` (exported or local symbols), one probe per
// launch: __cudaLaunchKernel[_ptsz] is left out where it only jumps to
// cudaLaunchKernel[_ptsz] (CUDA 13), so a <<<>>> launch takes one trap.
std::vector<ProbeTarget> probe_targets_in(const std::string& file);

// x86-64: the file offset a function at `offset` jumps to when its code is only
// a frame set-up and a tail jump (endbr64? push/mov/pop %rbp? jmp), else nullopt.
std::optional<uint64_t> tail_jump_target(const std::string& file, uint64_t offset);

// Files to probe: `explicit_libs` when given; otherwise the executable if it
// holds the runtime, the CUDA libraries it links (DT_NEEDED, through the
// linker cache), and those mapped by `pid`. Throws mcp::Error when none is found.
std::vector<std::string> find_cuda_files(pid_t pid, const std::string& executable,
                                         const std::vector<std::string>& explicit_libs);

}  // namespace mcp::cuda
