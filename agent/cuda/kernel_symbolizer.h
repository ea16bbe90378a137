// KernelSymbolizer: names the kernel of each CUDA launch ("vecAdd(float*, int)").
// The BPF side locates the launched host function as (file inode, file offset),
// so names resolve even after the process has exited. Launches that pass a
// handle are named from the bookkeeping records this class consumes: a kernel
// handle (CUDA 12+ <<<>>>) through the host function __cudaGetKernel gave it;
// a driver CUfunction / CUkernel (cuLaunchKernel[Ex]) through the name it was
// looked up by (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction).
// cudaGraphLaunch gets its graph and that graph's kernel-node count when the
// graph was built with cudaGraphCreate + cudaGraphAddKernelNode and instantiated
// while traced. ELF symbol tables are loaded once per file. Single-threaded
// (the consumer thread).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/event.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"

namespace mcp::cuda {

class KernelSymbolizer {
 public:
  // A file that may hold kernels' host functions (the traced executable, libraries).
  void add_file(const std::string& path);
  // Reads process `pid`'s mappings now and keeps them for when it is gone: a kernel without
  // bpf_find_vma (before 5.17) leaves launches to be placed from /proc/PID/maps, which a
  // short-lived process (`trace -- CMD`, its kernels in a static runtime) no longer has by
  // the time its events are read.
  void remember_maps(pid_t pid);
  // Fills event.cuda.kernel for launches, graph and graph_kernel_nodes for
  // graph launches, and cudaFree's bytes from the cudaMalloc that returned the
  // pointer (when that call was kept). Expects event.cuda.api set. Returns
  // false for bookkeeping records, which callers must not pass on.
  bool process(Event& event);

 private:
  void record(const Event& event);
  std::string name_at(uint64_t inode, uint64_t offset, pid_t pid);
  const loader::ElfSymbols* symbols_for_inode(uint64_t inode, pid_t pid);
  // (inode, file offset) of a code address from the process's mappings, for records the
  // kernel could not place (no bpf_find_vma before 5.17); cached per (pid, address).
  std::optional<std::pair<uint64_t, uint64_t>> place(pid_t pid, uint64_t addr);

  std::map<uint64_t, std::string> files_by_inode_;
  std::map<std::string, std::unique_ptr<loader::ElfSymbols>> symbols_;
  using Handle = std::pair<pid_t, uint64_t>;
  struct GraphShape {
    uint64_t graph = 0;
    std::optional<uint32_t> kernel_nodes;
  };
  std::map<Handle, std::pair<uint64_t, uint64_t>> handles_;  // kernel handle -> (inode, offset)
  static constexpr size_t kMaxPlaced = 65536;
  std::map<Handle, std::pair<uint64_t, uint64_t>> placed_;   // place()'s answers
  std::map<Handle, std::string> driver_names_;               // CUfunction / CUkernel -> demangled name
  std::map<Handle, uint32_t> graph_kernel_nodes_;            // graphs built from empty while traced
  std::map<Handle, GraphShape> executables_;                 // cudaGraphExec_t -> its graph then
  std::map<std::pair<uint64_t, uint64_t>, std::string> names_;                   // cache
  std::map<std::pair<pid_t, uint64_t>, uint64_t> allocations_;                   // device pointer -> bytes
  std::map<pid_t, std::vector<loader::Mapping>> remembered_;                      // remember_maps()
};

}  // namespace mcp::cuda
