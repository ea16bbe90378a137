#include "cuda/cuda_targets.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include "common/error.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"
#include "mcp_abi.h"

namespace mcp::cuda {
namespace {

bool is_cuda_library(const std::string& name) {
  const auto base = name.substr(name.rfind('/') + 1);
  return base.rfind("libcudart.so", 0) == 0 || base.rfind("libcuda.so", 0) == 0;
}

bool has_cuda_api(const std::string& file) {
  try {
    const auto symbols = loader::ElfSymbols::load(file);
    return symbols.file_offset_of("cudaLaunchKernel") || symbols.file_offset_of("__cudaLaunchKernel") ||
           symbols.file_offset_of("cuLaunchKernel");
  } catch (const Error&) {
    return false;
  }
}

bool is_launch_api(uint8_t api) {
  return api == MCP_CUDA_LAUNCH || api == MCP_CUDA_LAUNCH_HANDLE || api == MCP_CUDA_LAUNCH_EXC ||
         api == MCP_CUDA_CU_LAUNCH || api == MCP_CUDA_CU_LAUNCH_EX;
}

}  // namespace

std::optional<uint64_t> tail_jump_target(const std::string& file, uint64_t offset) {
  std::ifstream f(file, std::ios::binary);
  unsigned char code[16] = {};
  if (!f.seekg(static_cast<std::streamoff>(offset)) || !f.read(reinterpret_cast<char*>(code), sizeof(code)))
    return std::nullopt;
  size_t at = 0;
  auto skip = [&](std::initializer_list<unsigned char> bytes) {
    if (std::memcmp(code + at, bytes.begin(), bytes.size()) == 0) at += bytes.size();
  };
  skip({0xf3, 0x0f, 0x1e, 0xfa});              // endbr64
  skip({0x55, 0x48, 0x89, 0xe5, 0x5d});        // push %rbp; mov %rsp,%rbp; pop %rbp
  if (code[at] == 0xe9) {                      // jmp rel32
    int32_t rel;
    std::memcpy(&rel, code + at + 1, sizeof(rel));
    return offset + at + 5 + static_cast<int64_t>(rel);
  }
  if (code[at] == 0xeb) return offset + at + 2 + static_cast<int8_t>(code[at + 1]);  // jmp rel8
  return std::nullopt;
}

const std::vector<ApiSpec>& api_specs() {
  static const std::vector<ApiSpec> specs = {
      // symbol, display, api, vma_arg, entry_deref_arg, ret_deref_arg, name_arg, internal
      {"cudaLaunchKernel", "cudaLaunchKernel", MCP_CUDA_LAUNCH, 1, 0, 0, 0, false},
      {"cudaLaunchKernel_ptsz", "cudaLaunchKernel_ptsz", MCP_CUDA_LAUNCH, 1, 0, 0, 0, false},
      // What <<<>>> calls since CUDA 12.x. In CUDA 13 it only jumps into cudaLaunchKernel
      // (probed anyway) and is not probed; where it does more, both are probed and the
      // BPF side folds the nested call into this one launch (MCP_CUDA_CFG_FOLD_NESTED).
      {"__cudaLaunchKernel", "cudaLaunchKernel", MCP_CUDA_LAUNCH_HANDLE, 1, 0, 0, 0, false},
      {"__cudaLaunchKernel_ptsz", "cudaLaunchKernel_ptsz", MCP_CUDA_LAUNCH_HANDLE, 1, 0, 0, 0, false},
      {"cudaLaunchKernelExC", "cudaLaunchKernelExC", MCP_CUDA_LAUNCH_EXC, 2, 1, 0, 0, false},
      {"cudaLaunchKernelExC_ptsz", "cudaLaunchKernelExC_ptsz", MCP_CUDA_LAUNCH_EXC, 2, 1, 0, 0, false},
      {"cuLaunchKernel", "cuLaunchKernel", MCP_CUDA_CU_LAUNCH, 0, 0, 0, 0, false},
      {"cuLaunchKernel_ptsz", "cuLaunchKernel_ptsz", MCP_CUDA_CU_LAUNCH, 0, 0, 0, 0, false},
      {"cuLaunchKernelEx", "cuLaunchKernelEx", MCP_CUDA_CU_LAUNCH_EX, 0, 1, 0, 0, false},
      {"cuLaunchKernelEx_ptsz", "cuLaunchKernelEx_ptsz", MCP_CUDA_CU_LAUNCH_EX, 0, 1, 0, 0, false},
      {"cudaMemcpy", "cudaMemcpy", MCP_CUDA_MEMCPY, 0, 0, 0, 0, false},
      {"cudaMemcpyAsync", "cudaMemcpyAsync", MCP_CUDA_MEMCPY_ASYNC, 0, 0, 0, 0, false},
      {"cudaMalloc", "cudaMalloc", MCP_CUDA_MALLOC, 0, 0, 1, 0, false},
      {"cudaFree", "cudaFree", MCP_CUDA_FREE, 0, 0, 0, 0, false},
      {"cudaStreamSynchronize", "cudaStreamSynchronize", MCP_CUDA_STREAM_SYNC, 0, 0, 0, 0, false},
      {"cudaDeviceSynchronize", "cudaDeviceSynchronize", MCP_CUDA_DEVICE_SYNC, 0, 0, 0, 0, false},
      {"cudaGraphLaunch", "cudaGraphLaunch", MCP_CUDA_GRAPH_LAUNCH, 0, 0, 0, 0, false},
      {"cudaGraphLaunch_ptsz", "cudaGraphLaunch_ptsz", MCP_CUDA_GRAPH_LAUNCH, 0, 0, 0, 0, false},
      // Bookkeeping: rare calls (module load, graph construction), all kept, so launches
      // are named in userspace from their handle and the launch itself stays one trap.
      {"__cudaGetKernel", "__cudaGetKernel", MCP_CUDA_GET_KERNEL, 2, 0, 1, 0, true},
      {"cuModuleGetFunction", "cuModuleGetFunction", MCP_CUDA_GET_FUNCTION, 0, 0, 1, 3, true},
      {"cuLibraryGetKernel", "cuLibraryGetKernel", MCP_CUDA_GET_FUNCTION, 0, 0, 1, 3, true},
      {"cuKernelGetFunction", "cuKernelGetFunction", MCP_CUDA_KERNEL_FUNCTION, 0, 0, 1, 0, true},
      {"cudaGraphCreate", "cudaGraphCreate", MCP_CUDA_GRAPH_NEW, 0, 0, 1, 0, true},
      {"cudaStreamEndCapture", "cudaStreamEndCapture", MCP_CUDA_GRAPH_CAPTURED, 0, 0, 2, 0, true},
      {"cudaStreamEndCapture_ptsz", "cudaStreamEndCapture_ptsz", MCP_CUDA_GRAPH_CAPTURED, 0, 0, 2, 0, true},
      {"cudaGraphAddKernelNode", "cudaGraphAddKernelNode", MCP_CUDA_GRAPH_ADD_KERNEL, 0, 0, 0, 0, true},
      {"cudaGraphInstantiate", "cudaGraphInstantiate", MCP_CUDA_GRAPH_INSTANTIATE, 0, 0, 1, 0, true},
      {"cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithFlags", MCP_CUDA_GRAPH_INSTANTIATE, 0, 0, 1, 0, true},
      {"cudaGraphInstantiateWithParams", "cudaGraphInstantiateWithParams", MCP_CUDA_GRAPH_INSTANTIATE, 0, 0, 1, 0,
       true},
      {"cudaGraphInstantiateWithParams_ptsz", "cudaGraphInstantiateWithParams_ptsz", MCP_CUDA_GRAPH_INSTANTIATE, 0, 0,
       1, 0, true},
  };
  return specs;
}

std::vector<ProbeTarget> probe_targets_in(const std::string& file) {
  const auto symbols = loader::ElfSymbols::load(file);
  std::vector<ProbeTarget> out;
  bool nested = false;
  for (const auto& spec : api_specs()) {
    auto offset = symbols.file_offset_of(spec.symbol);
    if (!offset) continue;
    if (spec.api == MCP_CUDA_LAUNCH_HANDLE) {
      // A launch entry that only jumps into the API it is named after costs a trap for
      // nothing: the callee's probe sees the same registers (rdi: the kernel handle).
      const auto callee = symbols.file_offset_of(spec.display);
      if (callee && tail_jump_target(file, *offset) == callee) continue;
      nested = true;
    }
    out.push_back({{file, spec.symbol, *offset}, &spec});
  }
  for (auto& t : out) t.fold_nested = nested && is_launch_api(t.api->api);
  return out;
}

std::vector<std::string> find_cuda_files(pid_t pid, const std::string& executable,
                                         const std::vector<std::string>& explicit_libs) {
  std::vector<std::string> files;
  auto add = [&](const std::string& f) {
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  };
  if (!explicit_libs.empty()) {
    for (const auto& lib : explicit_libs) add(loader::resolve_binary(lib, pid));
    return files;
  }
  if (!executable.empty()) {
    if (has_cuda_api(executable)) add(executable);  // static runtime
    const auto symbols = loader::ElfSymbols::load(executable);
    for (const auto& needed : symbols.needed()) {
      if (!is_cuda_library(needed)) continue;
      try {
        add(loader::resolve_binary(needed, pid));
      } catch (const Error&) {
        // not in the linker cache: the process's maps (below) may still find it
      }
    }
  }
  if (pid > 0) {
    for (const auto& m : loader::read_proc_maps(pid))
      if (m.executable && (is_cuda_library(m.path) || (m.path == executable && has_cuda_api(m.path)))) add(m.path);
  }
  if (files.empty())
    throw runtime_error("no CUDA runtime found for " + (executable.empty() ? "pid " + std::to_string(pid) : executable) +
                        " (give --cuda-lib PATH)");
  return files;
}

}  // namespace mcp::cuda
