// KernelSymbolizer: names the kernel of each CUDA launch ("vecAdd(float*, int)").
// The BPF side locates the launched host function as (file inode, file offset),
// so names resolve even after the process has exited. Launches that pass a
// kernel handle (CUDA 12+ <<<>>>) are named through the handle the process got
// from __cudaGetKernel, whose records this class consumes. ELF symbol tables
// are loaded once per file. Single-threaded (the consumer thread).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/event.h"
#include "loader/elf_symbols.h"

namespace mcp::cuda {

class KernelSymbolizer {
 public:
  // A file that may hold kernels' host functions (the traced executable, libraries).
  void add_file(const std::string& path);
  // Fills event.cuda.kernel for launches, and cudaFree's bytes from the
  // cudaMalloc that returned the pointer (when that call was kept). Expects
  // event.cuda.api set. Returns false for bookkeeping records (handle
  // registrations), which callers must not pass on.
  bool process(Event& event);

 private:
  std::string name_at(uint64_t inode, uint64_t offset, pid_t pid);
  const loader::ElfSymbols* symbols_for_inode(uint64_t inode, pid_t pid);

  std::map<uint64_t, std::string> files_by_inode_;
  std::map<std::string, std::unique_ptr<loader::ElfSymbols>> symbols_;
  std::map<std::pair<pid_t, uint64_t>, std::pair<uint64_t, uint64_t>> handles_;  // -> (inode, offset)
  std::map<std::pair<uint64_t, uint64_t>, std::string> names_;                   // cache
  std::map<std::pair<pid_t, uint64_t>, uint64_t> allocations_;                   // device pointer -> bytes
};

}  // namespace mcp::cuda
