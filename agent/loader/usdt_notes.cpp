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
  std::vector<UsdtProbe> out;
  file.for_each_note([&](const char* section, const GElf_Nhdr& nh, const char* name, const char* desc) {
    if (std::strcmp(section, ".note.stapsdt") != 0 || nh.n_type != kNtStapsdt ||
        nh.n_namesz != sizeof("stapsdt") || std::memcmp(name, "stapsdt", sizeof("stapsdt")) != 0)
      return true;
    const size_t size = nh.n_descsz;
    if (size < 3 * width) return true;
    UsdtProbe p;
    p.address = take_address(desc, width);
    p.semaphore = take_address(desc + 2 * width, width);
    size_t pos = 3 * width;
    if (!take_string(desc, size, pos, p.provider) || !take_string(desc, size, pos, p.name) || p.provider.empty() ||
        p.name.empty())
      return true;
    if (!take_string(desc, size, pos, p.args)) p.args.clear();  // a probe without arguments may omit it
    out.push_back(std::move(p));
    return true;
  });
  return out;
}

}  // namespace mcp::loader
