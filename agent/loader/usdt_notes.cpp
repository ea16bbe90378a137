#include "loader/usdt_notes.h"

#include <cstring>
#include <sstream>

#include "common/error.h"
#include "loader/elf_file.h"

namespace mcp::loader {
namespace {

constexpr uint32_t kNtStapsdt = 3;

// One string of a note's descriptor starting at `pos`; false when it runs off the end.
bool take_string(const char* desc, size_t size, size_t& pos, std::string& out) {
  if (pos >= size) return false;
  const void* nul = std::memchr(desc + pos, '\0', size - pos);
  if (!nul) return false;
  const size_t len = static_cast<const char*>(nul) - (desc + pos);
  out.assign(desc + pos, len);
  pos += len + 1;
  return true;
}

uint64_t take_address(const char* p, size_t width) {
  if (width == 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The file offset `address` is loaded from: a PT_LOAD segment holding it in its file part
// (executable for a site, any for a semaphore); 0 when none does.
uint64_t offset_in_file(Elf* elf, uint64_t address, bool code) {
  size_t n = 0;
  if (address == 0 || elf_getphdrnum(elf, &n) != 0) return 0;
  for (size_t i = 0; i < n; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, static_cast<int>(i), &ph) || ph.p_type != PT_LOAD || (code && !(ph.p_flags & PF_X)))
      continue;
    if (address >= ph.p_vaddr && address - ph.p_vaddr < ph.p_filesz) return address - ph.p_vaddr + ph.p_offset;
  }
  return 0;
}

// The address of section `name`, 0 when the file has none.
uint64_t section_address(Elf* elf, size_t shstrndx, const char* name) {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    const char* sname = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : nullptr;
    if (sname && std::strcmp(sname, name) == 0) return sh.sh_addr;
  }
  return 0;
}

}  // namespace

size_t UsdtProbe::nargs() const {
  std::istringstream in(args);
  size_t n = 0;
  for (std::string spec; in >> spec;) n++;
  return n;
}

std::vector<UsdtProbe> read_usdt_probes(const std::string& path) {
  const ElfFile file = ElfFile::open_or_throw(path);
  const size_t width = gelf_getclass(file.get()) == ELFCLASS32 ? 4 : 8;
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(file.get(), &shstrndx) != 0) throw runtime_error(path + ": bad ELF section headers");
  // A note records the address .stapsdt.base had when it was written; prelinking moves both.
  const uint64_t base_now = section_address(file.get(), shstrndx, ".stapsdt.base");
  std::vector<UsdtProbe> out;
  file.for_each_note([&](const char* section, const GElf_Nhdr& nh, const char* name, const char* desc) {
    if (std::strcmp(section, ".note.stapsdt") != 0 || nh.n_type != kNtStapsdt ||
        nh.n_namesz != sizeof("stapsdt") || std::memcmp(name, "stapsdt", sizeof("stapsdt")) != 0)
      return true;
    const size_t size = nh.n_descsz;
    if (size < 3 * width) return true;
    UsdtProbe p;
    p.address = take_address(desc, width);
    const uint64_t base_then = take_address(desc + width, width);
    p.semaphore = take_address(desc + 2 * width, width);
    size_t pos = 3 * width;
    if (!take_string(desc, size, pos, p.provider) || !take_string(desc, size, pos, p.name) || p.provider.empty() ||
        p.name.empty())
      return true;
    if (!take_string(desc, size, pos, p.args)) p.args.clear();  // a probe without arguments may omit it
    const uint64_t shift = base_then && base_now ? base_now - base_then : 0;  // wraps as the linker's did
    p.file_offset = offset_in_file(file.get(), p.address + shift, true);
    if (p.semaphore) p.semaphore_offset = offset_in_file(file.get(), p.semaphore + shift, false);
    out.push_back(std::move(p));
    return true;
  });
  return out;
}

}  // namespace mcp::loader
