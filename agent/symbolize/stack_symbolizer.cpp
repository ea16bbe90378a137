#include "symbolize/stack_symbolizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "loader/target_resolver.h"

namespace mcp::symbolize {
namespace {

constexpr const char* kUnknown = "[unknown]";

std::string hex_of(const std::array<uint8_t, 20>& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : id) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

// A build id of fewer than 20 bytes is zero-padded by the kernel: compare on the file's length.
std::string trimmed(const std::string& hex, size_t len) { return hex.substr(0, std::min(hex.size(), len)); }

}  // namespace

StackSymbolizer::StackSymbolizer(Limits limits) : limits_(limits) {}

void StackSymbolizer::add_file(const std::string& path) {
  const std::string id = loader::read_build_id(path);
  if (!id.empty()) remember_build_id(id, path, path);
}

// A file reached through /proc/PID/root lasts only as long as that process: a path the agent
// can open on its own (a probe's file, one in the agent's root) is kept over it.
void StackSymbolizer::remember_build_id(const std::string& hex, const std::string& path, const std::string& shown) {
  const std::string key = trimmed(hex, 40);
  auto it = by_build_id_.find(key);
  const auto lasting = [](const std::string& p) { return !p.empty() && p.rfind("/proc/", 0) != 0; };
  if (it != by_build_id_.end() && lasting(it->second.first) && !lasting(path)) return;
  if (it == by_build_id_.end() && by_build_id_.size() >= limits_.build_ids) by_build_id_.clear();
  by_build_id_[key] = {path, shown};
}

void StackSymbolizer::symbolize(Event& e) {
  const CapturedStack& c = e.captured_stack;
  if (c.empty()) return;
  e.stack.clear();
  e.stack.reserve(c.kernel.size() + c.user.size());
  for (uint64_t ip : c.kernel) e.stack.push_back(kernel_frame(ip));
  for (size_t i = 0; i < c.user.size(); i++)
    e.stack.push_back(user_frame(static_cast<pid_t>(e.pid), c.user[i],
                                 i < c.user_ids.size() ? c.user_ids[i] : CapturedStack::BuildIdFrame{}));
  e.attributes.emplace_back("code.stacktrace", render(e.stack));
}

std::string StackSymbolizer::render(const std::vector<StackFrame>& frames) {
  std::string out;
  for (const auto& f : frames) fmt::format_to(std::back_inserter(out), "{}+{:#x} ({})\n", f.sym, f.offset, f.module);
  if (!out.empty()) out.pop_back();
  return out;
}

void StackSymbolizer::load_kallsyms() {
  kallsyms_loaded_ = true;
  std::ifstream in("/proc/kallsyms");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string addr, type, name, module;
    if (!(fields >> addr >> type >> name)) continue;
    fields >> module;
    if (type != "t" && type != "T" && type != "w" && type != "W") continue;  // functions only
    const uint64_t a = std::strtoull(addr.c_str(), nullptr, 16);
    if (a == 0) continue;  // hidden (kptr_restrict): nothing can be named
    kallsyms_.push_back({a, name, module.empty() ? "[kernel]" : module});
  }
  std::sort(kallsyms_.begin(), kallsyms_.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
}

StackFrame StackSymbolizer::kernel_frame(uint64_t ip) {
  if (!kallsyms_loaded_) load_kallsyms();
  auto it = std::upper_bound(kallsyms_.begin(), kallsyms_.end(), ip,
                             [](uint64_t v, const KernelSymbol& s) { return v < s.addr; });
  if (it == kallsyms_.begin()) return {ip, kUnknown, 0, "[kernel]"};
  --it;
  return {ip, it->name, ip - it->addr, it->module};
}

std::shared_ptr<const loader::ElfSymbols> StackSymbolizer::symbols_of(const std::string& path) {
  if (auto it = file_index_.find(path); it != file_index_.end()) {
    files_.splice(files_.begin(), files_, it->second);
    return it->second->second;
  }
  std::shared_ptr<const loader::ElfSymbols> symbols;
  try {
    symbols = std::make_shared<const loader::ElfSymbols>(loader::ElfSymbols::load(path));
  } catch (const std::exception&) {
    symbols = nullptr;  // gone or not ELF: its frames stay unnamed, and we do not retry each time
  }
  files_.emplace_front(path, symbols);
  file_index_[path] = files_.begin();
  if (files_.size() > limits_.files) {
    file_index_.erase(files_.back().first);
    files_.pop_back();
  }
  return symbols;
}

const std::vector<loader::Mapping>* StackSymbolizer::mappings_of(pid_t pid, bool refresh) {
  auto it = process_index_.find(pid);
  if (it != process_index_.end() && !refresh) {
    processes_.splice(processes_.begin(), processes_, it->second);
    return &it->second->maps;
  }
  auto maps = loader::read_proc_maps(pid);
  if (maps.empty()) return it != process_index_.end() ? &it->second->maps : nullptr;  // gone: keep what we had
  // Every file it maps is indexed by build id, so its frames stay nameable after it exits
  // (opened by its path in the agent's root when the process shares it, else through its root).
  for (const auto& m : maps) {
    if (!m.executable || m.path.empty() || m.path[0] != '/') continue;
    const uint64_t key = m.dev * 0x9e3779b97f4a7c15ull ^ m.inode;
    auto known = inode_build_ids_.find(key);
    if (known == inode_build_ids_.end()) {
      if (inode_build_ids_.size() >= limits_.build_ids) inode_build_ids_.clear();
      const std::string file = loader::path_in_root_of(pid, m.path);
      known = inode_build_ids_.emplace(key, std::make_pair(file, file.empty() ? "" : loader::read_build_id(file))).first;
    }
    if (!known->second.second.empty()) remember_build_id(known->second.second, known->second.first, m.path);
  }
  if (it != process_index_.end()) {
    it->second->maps = std::move(maps);
    processes_.splice(processes_.begin(), processes_, it->second);
    return &it->second->maps;
  }
  processes_.push_front({pid, std::move(maps)});
  process_index_[pid] = processes_.begin();
  if (processes_.size() > limits_.processes) {
    process_index_.erase(processes_.back().pid);
    processes_.pop_back();
  }
  return &processes_.front().maps;
}

StackFrame StackSymbolizer::frame_in_file(const std::string& path, const std::string& shown, uint64_t ip,
                                          uint64_t file_offset) {
  StackFrame f{ip, kUnknown, file_offset, shown};
  const auto symbols = symbols_of(path);
  if (!symbols) return f;
  const auto vaddr = symbols->file_offset_to_vaddr(file_offset);
  if (!vaddr) return f;
  if (const auto* sym = symbols->symbol_at(*vaddr)) {
    f.sym = loader::demangle(sym->name.substr(0, sym->name.find('@')));
    f.offset = *vaddr - sym->vaddr;
  }
  return f;
}

StackFrame StackSymbolizer::user_frame(pid_t pid, uint64_t ip, const CapturedStack::BuildIdFrame& id) {
  if (id.valid) {
    const std::string hex = trimmed(hex_of(id.build_id), 40);
    auto known = by_build_id_.find(hex);
    if (known == by_build_id_.end()) {
      mappings_of(pid, true);  // learn the build ids of its files while it lives
      known = by_build_id_.find(hex);
    }
    // The kernel pads a short build id with zeros: match a known id that is its prefix.
    if (known == by_build_id_.end())
      for (auto it = by_build_id_.begin(); it != by_build_id_.end(); ++it)
        if (hex.compare(0, it->first.size(), it->first) == 0 &&
            hex.find_first_not_of('0', it->first.size()) == std::string::npos) {
          known = it;
          break;
        }
    if (known == by_build_id_.end()) {
      // Not among the files of any process seen (a deleted file, a process gone before its
      // mappings were read): remembered as such, so its next frames cost no /proc read.
      remember_build_id(hex, "", "build-id:" + hex);
      known = by_build_id_.find(hex);
    }
    if (known->second.first.empty()) return {ip, kUnknown, id.file_offset, known->second.second};
    return frame_in_file(known->second.first, known->second.second, ip, id.file_offset);
  }
  // No build id (stripped of it, or its page not in memory): the process's mappings, if alive.
  for (bool refresh : {false, true}) {
    const auto* maps = mappings_of(pid, refresh);
    if (!maps) break;
    for (const auto& m : *maps)
      if (ip >= m.start && ip < m.end && !m.path.empty() && m.path[0] == '/')
        return frame_in_file(loader::path_in_root_of(pid, m.path), m.path, ip, ip - m.start + m.offset);
  }
  return {ip, kUnknown, 0, kUnknown};
}

}  // namespace mcp::symbolize
