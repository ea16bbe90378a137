#include "loader/elf_symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.h"

namespace mcp::loader {
namespace {

struct ElfFile {
  int fd = -1;
  Elf* elf = nullptr;
  ~ElfFile() {
    if (elf) elf_end(elf);
    if (fd >= 0) close(fd);
  }
};

// The NT_GNU_BUILD_ID note of any note section, as hex (gelf_getnote bounds each note).
std::string build_id_of(Elf* elf) {
  static constexpr char kHex[] = "0123456789abcdef";
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || !data->d_buf) continue;
    size_t offset = 0, name_off = 0, desc_off = 0;
    GElf_Nhdr nh;
    while ((offset = gelf_getnote(data, offset, &nh, &name_off, &desc_off)) > 0) {
      const auto* base = static_cast<const unsigned char*>(data->d_buf);
      if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 || std::memcmp(base + name_off, "GNU", 4) != 0 ||
          nh.n_descsz == 0 || nh.n_descsz > 64)
        continue;
      std::string hex;
      for (size_t i = 0; i < nh.n_descsz; i++) {
        hex.push_back(kHex[base[desc_off + i] >> 4]);
        hex.push_back(kHex[base[desc_off + i] & 15]);
      }
      return hex;
    }
  }
  return {};
}

}  // namespace

std::string read_build_id(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) return {};
  ElfFile f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return {};
  f.elf = elf_begin(f.fd, ELF_C_READ, nullptr);
  if (!f.elf || elf_kind(f.elf) != ELF_K_ELF) return {};
  return build_id_of(f.elf);
}

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

ElfSymbols ElfSymbols::load(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) throw runtime_error("libelf initialisation failed");
  ElfFile f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) throw runtime_error("cannot open " + path + ": " + std::strerror(errno));
  f.elf = elf_begin(f.fd, ELF_C_READ, nullptr);
  if (!f.elf || elf_kind(f.elf) != ELF_K_ELF) throw runtime_error(path + " is not an ELF file");

  ElfSymbols out;
  out.path_ = path;
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(f.elf, &ehdr)) throw runtime_error(path + ": bad ELF header");
  out.is_dyn_ = ehdr.e_type == ET_DYN;

  size_t nphdr = 0;
  elf_getphdrnum(f.elf, &nphdr);
  for (size_t i = 0; i < nphdr; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(f.elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      out.exec_segments_.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
  }

  out.build_id_ = build_id_of(f.elf);
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(f.elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    if (sh.sh_type == SHT_DYNAMIC) {
      Elf_Data* dyn = elf_getdata(scn, nullptr);
      for (size_t i = 0; dyn && sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
        GElf_Dyn d;
        if (gelf_getdyn(dyn, static_cast<int>(i), &d) && d.d_tag == DT_NEEDED)
          if (const char* name = elf_strptr(f.elf, sh.sh_link, d.d_un.d_val)) out.needed_.emplace_back(name);
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
      const char* name = elf_strptr(f.elf, sh.sh_link, sym.st_name);
      if (!name || !*name) continue;
      out.symbols_.push_back({name, sym.st_value, sym.st_size});
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
