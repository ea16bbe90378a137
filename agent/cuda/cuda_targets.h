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
#include "mcp_abi.h"

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

// Launch APIs of the runtime (cudaLaunchKernel[ExC], __cudaLaunchKernel) and of the driver
// (cuLaunchKernel[Ex]). Either, or a graph launch, is a launch users see (`cuda.launch`,
// pipeline::is_launch_api).
bool is_runtime_launch(uint8_t api);
bool is_driver_launch(uint8_t api);

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

// A CUDA runtime ("libcudart*", auditwheel's libcudart-HASH.so.N too) or driver
// ("libcuda.so*", "libcuda-*") file name, as the kernel's discovery matches it
// (bpf/process.bpf.c); a path's directory is ignored.
bool is_cuda_library(const std::string& name);
bool is_runtime_library(const std::string& name);

// The file as the kernel names it (super block dev as MKDEV, inode), by stat.
std::optional<mcp_file_key> kernel_file_key(const std::string& path);
// A userspace dev_t (stat's st_dev, /proc/PID/maps' major:minor) as the kernel's: major << 20 | minor.
uint64_t kernel_dev(uint64_t dev);

// The CUDA files a process starts with: the executable if it holds the runtime (static,
// nvcc's default) and the CUDA libraries it links (DT_NEEDED, through the linker cache).
// Libraries loaded later (dlopen) are found by discovery. Never throws; empty if none.
std::vector<std::string> linked_cuda_files(const std::string& executable);

}  // namespace mcp::cuda
