#include "loader/elf_symbols.h"

#include <cxxabi.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "loader/elf_file.h"

namespace mcp::loader {
namespace {

// The NT_GNU_BUILD_ID note, as hex.
std::string build_id_of(const ElfFile& f) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  f.for_each_note([&](const char*, const GElf_Nhdr& nh, const char* name, const char* desc) {
    if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 || std::memcmp(name, "GNU", 4) != 0 || nh.n_descsz == 0 ||
        nh.n_descsz > 64)
      return true;
    for (size_t i = 0; i < nh.n_descsz; i++) {
      const auto b = static_cast<unsigned char>(desc[i]);
      hex.push_back(kHex[b >> 4]);
      hex.push_back(kHex[b & 15]);
    }
    return false;
  });
  return hex;
}

}  // namespace

std::string read_build_id(const std::string& path) {
  const auto f = ElfFile::open(path);
  return f ? build_id_of(*f) : std::string();
}

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

ElfSymbols ElfSymbols::load(const std::string& path) {
  const ElfFile file = ElfFile::open_or_throw(path);
  Elf* const elf = file.get();

  ElfSymbols out;
  out.path_ = path;
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(elf, &ehdr)) throw runtime_error(path + ": bad ELF header");
  out.is_dyn_ = ehdr.e_type == ET_DYN;

  size_t nphdr = 0;
  elf_getphdrnum(elf, &nphdr);
  for (size_t i = 0; i < nphdr; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      out.exec_segments_.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
  }

  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    if (sh.sh_type == SHT_DYNAMIC) {
      Elf_Data* dyn = elf_getdata(scn, nullptr);
      for (size_t i = 0; dyn && sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
        GElf_Dyn d;
        if (gelf_getdyn(dyn, static_cast<int>(i), &d) && d.d_tag == DT_NEEDED)
          if (const char* name = elf_strptr(elf, sh.sh_link, d.d_un.d_val)) out.needed_.emplace_back(name);
      }
      continue;
    }
    if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || sh.sh_entsize == 0) continue;
    const size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; i++) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym)) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (!name || !*name) continue;
      out.symbols_.push_back({name, sym.st_value, sym.st_size, type == STT_GNU_IFUNC});
    }
  }
  std::sort(out.symbols_.begin(), out.symbols_.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
    return a.vaddr != b.vaddr ? a.vaddr < b.vaddr : a.name < b.name;
  });
  // .symtab and .dynsym repeat many entries.
  out.symbols_.erase(std::unique(out.symbols_.begin(), out.symbols_.end(),
                                 [](const ElfSymbol& a, const ElfSymbol& b) {
                                   return a.vaddr == b.vaddr && a.name == b.name;
                                 }),
                     out.symbols_.end());
  return out;
}

bool ElfSymbols::is_ifunc(std::string_view name) const {
  return std::any_of(symbols_.begin(), symbols_.end(), [&](const ElfSymbol& s) { return s.ifunc && s.name == name; });
}

std::optional<uint64_t> ElfSymbols::vaddr_to_file_offset(uint64_t vaddr) const {
  for (const auto& s : exec_segments_)
    if (vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz) return vaddr - s.vaddr + s.offset;
  return std::nullopt;
}

std::optional<uint64_t> ElfSymbols::file_offset_to_vaddr(uint64_t offset) const {
  for (const auto& s : exec_segments_)
    if (offset >= s.offset && offset < s.offset + s.filesz) return offset - s.offset + s.vaddr;
  return std::nullopt;
}

std::optional<uint64_t> ElfSymbols::file_offset_of(std::string_view name) const {
  // Versioned dynamic names look like "malloc@@GLIBC_2.2.5"; match the base name.
  auto base = [](std::string_view s) { return s.substr(0, s.find('@')); };
  for (const auto& s : symbols_)
    if (base(s.name) == name) return vaddr_to_file_offset(s.vaddr);
  if (name.find('(') != std::string_view::npos)
    for (const auto& s : symbols_)
      if (demangle(s.name) == name) return vaddr_to_file_offset(s.vaddr);
  return std::nullopt;
}

std::vector<std::string> ElfSymbols::functions_matching(const std::string& pattern) const {
  std::vector<std::string> out;
  for (const auto& s : symbols_) {
    const std::string name = s.name.substr(0, s.name.find('@'));
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0 || fnmatch(pattern.c_str(), demangle(name).c_str(), 0) == 0)
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const ElfSymbol* ElfSymbols::symbol_at(uint64_t vaddr) const {
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), vaddr,
                             [](uint64_t v, const ElfSymbol& s) { return v < s.vaddr; });
  if (it == symbols_.begin()) return nullptr;
  --it;
  if (vaddr == it->vaddr || vaddr < it->vaddr + std::max<uint64_t>(it->size, 1)) return &*it;
  return nullptr;
}

}  // namespace mcp::loader
