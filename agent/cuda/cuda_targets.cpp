#include "cuda/cuda_targets.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "common/error.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"
#include "mcp_abi.h"

namespace mcp::cuda {
namespace {

bool has_cuda_api(const std::string& file) {
  try {
    const auto symbols = loader::ElfSymbols::load(file);
    return symbols.file_offset_of("cudaLaunchKernel") || symbols.file_offset_of("__cudaLaunchKernel") ||
           symbols.file_offset_of("cuLaunchKernel");
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

bool is_runtime_launch(uint8_t api) {
  return api == MCP_CUDA_LAUNCH || api == MCP_CUDA_LAUNCH_HANDLE || api == MCP_CUDA_LAUNCH_EXC;
}

bool is_driver_launch(uint8_t api) { return api == MCP_CUDA_CU_LAUNCH || api == MCP_CUDA_CU_LAUNCH_EX; }

bool is_runtime_library(const std::string& name) {
  const auto base = name.substr(name.rfind('/') + 1);
  return base.rfind("libcudart.", 0) == 0 || base.rfind("libcudart-", 0) == 0;
}

bool is_cuda_library(const std::string& name) {
  const auto base = name.substr(name.rfind('/') + 1);
  return is_runtime_library(base) || base.rfind("libcuda.", 0) == 0 || base.rfind("libcuda-", 0) == 0;
}

std::optional<mcp_file_key> kernel_file_key(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return mcp_file_key{kernel_dev(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

uint64_t kernel_dev(uint64_t dev) { return (static_cast<uint64_t>(major(dev)) << 20) | minor(dev); }

namespace {

// The libraries the dynamic loader would map for `executable` (`ld.so --list`, as ldd
// asks it: RUNPATH, $ORIGIN, LD_LIBRARY_PATH and the linker cache as the loader applies
// them), by name -> path. Empty when the standard loader is absent or refuses.
std::vector<std::pair<std::string, std::string>> loader_list(const std::string& executable) {
  static const char* const kLoaders[] = {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"};
  const char* ld = nullptr;
  for (const char* l : kLoaders)
    if (access(l, X_OK) == 0) ld = l;
  std::vector<std::pair<std::string, std::string>> out;
  int fds[2];
  if (!ld || pipe2(fds, O_CLOEXEC) != 0) return out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string arg0 = ld, arg1 = "--list", arg2 = executable;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, ld, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; rc == 0 && (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    // "\tlibcuda.so.1 => /path/libcuda.so.1 (0x00007f...)"
    const auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    const auto name_at = line.find_first_not_of(" \t");
    const auto end = line.find(" (", arrow);
    out.emplace_back(line.substr(name_at, arrow - name_at),
                     line.substr(arrow + 4, end == std::string::npos ? std::string::npos : end - arrow - 4));
  }
  return out;
}

}  // namespace

std::vector<std::string> linked_cuda_files(const std::string& executable) {
  std::vector<std::string> files;
  if (executable.empty()) return files;
  if (has_cuda_api(executable)) files.push_back(executable);  // static runtime
  for (const auto& [name, path] : loader_list(executable))
    if (is_cuda_library(name) && !path.empty() && path.front() == '/') files.push_back(path);
  return files;
}

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
  for (auto& t : out) t.fold_nested = nested && (is_runtime_launch(t.api->api) || is_driver_launch(t.api->api));
  return out;
}

}  // namespace mcp::cuda
