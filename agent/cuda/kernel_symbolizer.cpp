#include "cuda/kernel_symbolizer.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "common/error.h"
#include "loader/proc_maps.h"

namespace mcp::cuda {

void KernelSymbolizer::add_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) files_by_inode_[st.st_ino] = path;
}

const loader::ElfSymbols* KernelSymbolizer::symbols_for_inode(uint64_t inode, pid_t pid) {
  auto it = files_by_inode_.find(inode);
  if (it == files_by_inode_.end()) {
    // A file we were not told about: learn the process's files while it lives.
    for (const auto& m : loader::read_proc_maps(pid)) add_file(m.path);
    it = files_by_inode_.find(inode);
    if (it == files_by_inode_.end()) return nullptr;
  }
  auto& slot = symbols_[it->second];
  if (!slot) {
    try {
      slot = std::make_unique<loader::ElfSymbols>(loader::ElfSymbols::load(it->second));
    } catch (const Error&) {
      return nullptr;
    }
  }
  return slot.get();
}

std::string KernelSymbolizer::name_at(uint64_t inode, uint64_t offset, pid_t pid) {
  const auto key = std::make_pair(inode, offset);
  if (auto it = names_.find(key); it != names_.end()) return it->second;
  std::string name;
  if (const auto* symbols = symbols_for_inode(inode, pid)) {
    if (auto vaddr = symbols->file_offset_to_vaddr(offset))
      if (const auto* sym = symbols->symbol_at(*vaddr)) name = loader::demangle(sym->name);
  }
  if (!name.empty()) names_[key] = name;
  return name;
}

bool KernelSymbolizer::process(Event& e) {
  if (e.kind != EventKind::kCuda) return true;
  auto& c = e.cuda;
  if (c.internal) {
    if (c.code_inode) handles_[{static_cast<pid_t>(e.pid), c.function}] = {c.code_inode, c.code_offset};
    return false;
  }
  const auto pid = static_cast<pid_t>(e.pid);
  if (c.api == "cudaMalloc" && e.ret == 0 && c.function) allocations_[{pid, c.function}] = c.bytes;
  if (c.api == "cudaFree") {
    if (auto it = allocations_.find({pid, c.function}); it != allocations_.end()) {
      c.bytes = it->second;
      allocations_.erase(it);
    }
  }
  const bool is_launch = c.grid[0] || c.grid[1] || c.grid[2];  // only launches carry geometry
  if (!is_launch) return true;
  std::string name;
  if (c.code_inode) {
    name = name_at(c.code_inode, c.code_offset, static_cast<pid_t>(e.pid));
  } else if (auto it = handles_.find({static_cast<pid_t>(e.pid), c.function}); it != handles_.end()) {
    name = name_at(it->second.first, it->second.second, static_cast<pid_t>(e.pid));
  }
  c.kernel = name.empty() ? fmt::format("kernel@{:#x}", c.function) : name;
  return true;
}

}  // namespace mcp::cuda
