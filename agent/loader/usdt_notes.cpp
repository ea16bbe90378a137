#include "loader/usdt_notes.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "common/error.h"

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

}  // namespace

size_t UsdtProbe::nargs() const {
  std::istringstream in(args);
  size_t n = 0;
  for (std::string spec; in >> spec;) n++;
  return n;
}

std::vector<UsdtProbe> read_usdt_probes(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) throw runtime_error("libelf initialisation failed");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw runtime_error("cannot open " + path + ": " + std::strerror(errno));
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  struct Closer {
    int fd;
    Elf* elf;
    ~Closer() {
      if (elf) elf_end(elf);
      close(fd);
    }
  } closer{fd, elf};
  if (!elf || elf_kind(elf) != ELF_K_ELF) throw runtime_error(path + " is not an ELF file");
  const size_t width = gelf_getclass(elf) == ELFCLASS32 ? 4 : 8;
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) throw runtime_error(path + ": bad ELF section headers");

  std::vector<UsdtProbe> out;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!name || std::strcmp(name, ".note.stapsdt") != 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || !data->d_buf) continue;
    size_t offset = 0, name_off = 0, desc_off = 0;
    GElf_Nhdr nh;
    // gelf_getnote bounds every note by the section's data and returns 0 past the last.
    while ((offset = gelf_getnote(data, offset, &nh, &name_off, &desc_off)) > 0) {
      const char* base = static_cast<const char*>(data->d_buf);
      if (nh.n_type != kNtStapsdt || nh.n_namesz != sizeof("stapsdt") ||
          std::memcmp(base + name_off, "stapsdt", sizeof("stapsdt")) != 0)
        continue;
      const char* desc = base + desc_off;
      const size_t size = nh.n_descsz;
      if (size < 3 * width) continue;
      UsdtProbe p;
      p.address = take_address(desc, width);
      p.semaphore = take_address(desc + 2 * width, width);
      size_t pos = 3 * width;
      if (!take_string(desc, size, pos, p.provider) || !take_string(desc, size, pos, p.name) || p.provider.empty() ||
          p.name.empty())
        continue;
      if (!take_string(desc, size, pos, p.args)) p.args.clear();  // a probe without arguments may omit it
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace mcp::loader
