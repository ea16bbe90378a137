#include "cuda/kernel_symbolizer.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "common/error.h"
#include "loader/proc_maps.h"
#include "mcp_abi.h"

namespace mcp::cuda {

void KernelSymbolizer::add_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) files_by_inode_[st.st_ino] = path;
}

void KernelSymbolizer::remember_maps(pid_t pid) {
  auto maps = loader::read_proc_maps(pid);
  for (const auto& m : maps) add_file(m.path);
  if (!maps.empty()) remembered_[pid] = std::move(maps);
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

std::optional<std::pair<uint64_t, uint64_t>> KernelSymbolizer::place(pid_t pid, uint64_t addr) {
  const Handle key{pid, addr};
  auto it = placed_.find(key);
  if (it == placed_.end()) {
    if (placed_.size() >= kMaxPlaced) placed_.clear();  // many processes: start over, never grow without end
    std::pair<uint64_t, uint64_t> where{0, 0};           // inode 0: not in a file (or the process is gone)
    auto maps = loader::read_proc_maps(pid);
    if (maps.empty())
      if (auto r = remembered_.find(pid); r != remembered_.end()) maps = r->second;  // gone: as it was
    for (const auto& m : maps)
      if (addr >= m.start && addr < m.end && m.inode) where = {m.inode, addr - m.start + m.offset};
    it = placed_.emplace(key, where).first;  // a miss too: a flood of launches reads the maps once
  }
  if (!it->second.first) return std::nullopt;
  return it->second;
}

// Bookkeeping: only calls that succeeded (CUDA_SUCCESS / cudaSuccess) wrote their handles.
void KernelSymbolizer::record(const Event& e) {
  const auto& c = e.cuda;
  const Handle key{static_cast<pid_t>(e.pid), c.function};
  const Handle graph{static_cast<pid_t>(e.pid), c.graph};
  if (e.ret != 0 && c.api_id != MCP_CUDA_GET_KERNEL) return;
  switch (c.api_id) {
    case MCP_CUDA_GET_KERNEL:
      if (c.code_inode) handles_[key] = {c.code_inode, c.code_offset};
      else if (auto p = place(key.first, e.args[1])) handles_[key] = *p;  // the kernel could not place it
      break;
    case MCP_CUDA_GET_FUNCTION: {
      if (c.kernel.empty()) break;
      // BPF copies up to sizeof(mcp_cuda_event::name) - 1 bytes: a longer name is cut
      // and no longer demangles, so it is shown as cut.
      const bool cut = c.kernel.size() >= sizeof(mcp_cuda_event{}.name) - 1;
      driver_names_[key] = cut ? c.kernel + "..." : loader::demangle(c.kernel);
      break;
    }
    case MCP_CUDA_KERNEL_FUNCTION:
      if (auto it = driver_names_.find({key.first, e.args[1]}); it != driver_names_.end())
        driver_names_[key] = it->second;
      break;
    case MCP_CUDA_GRAPH_NEW:
      graph_kernel_nodes_[graph] = 0;  // a handle seen before is reused: its count starts over
      break;
    case MCP_CUDA_GRAPH_CAPTURED:
      graph_kernel_nodes_.erase(graph);  // captured launches are sampled: the count is not known
      break;
    case MCP_CUDA_GRAPH_ADD_KERNEL:
      if (auto it = graph_kernel_nodes_.find(graph); it != graph_kernel_nodes_.end()) it->second++;
      break;
    case MCP_CUDA_GRAPH_INSTANTIATE: {
      GraphShape shape{c.graph, std::nullopt};
      if (auto it = graph_kernel_nodes_.find(graph); it != graph_kernel_nodes_.end()) shape.kernel_nodes = it->second;
      executables_[key] = shape;
      break;
    }
    default:
      break;
  }
}

bool KernelSymbolizer::process(Event& e) {
  if (e.kind != EventKind::kCuda) return true;
  auto& c = e.cuda;
  if (c.internal) {
    record(e);
    return false;
  }
  const auto pid = static_cast<pid_t>(e.pid);
  if (c.api_id == MCP_CUDA_GRAPH_LAUNCH) {
    if (auto it = executables_.find({pid, c.function}); it != executables_.end()) {
      c.graph = it->second.graph;
      c.graph_kernel_nodes = it->second.kernel_nodes;
    }
    return true;
  }
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
  } else if (auto it = handles_.find({pid, c.function}); it != handles_.end()) {
    name = name_at(it->second.first, it->second.second, pid);
  } else if (auto named = driver_names_.find({pid, c.function}); named != driver_names_.end()) {
    name = named->second;
  } else if (auto p = place(pid, c.function)) {
    name = name_at(p->first, p->second, pid);  // the kernel could not place it (no bpf_find_vma)
  }
  c.kernel = name.empty() ? fmt::format("kernel@{:#x}", c.function) : name;
  return true;
}

}  // namespace mcp::cuda
