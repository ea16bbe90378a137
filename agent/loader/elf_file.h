// ElfFile: one ELF file open for libelf, closed with its descriptor when it goes; and the
// walk over its notes. Shared by the readers of symbols, build ids and USDT notes, so each
// opens and bounds a file the same way. Internal to mcp_resolve (it names libelf types).
#pragma once
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/unique_handle.h"

namespace mcp::loader {

class ElfFile {
 public:
  // nullopt when `path` cannot be opened or is not ELF; *why says which (when given).
  static std::optional<ElfFile> open(const std::string& path, std::string* why = nullptr) {
    if (elf_version(EV_CURRENT) == EV_NONE) return fail(why, "libelf initialisation failed");
    ElfFile f;
    f.fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.fd_) return fail(why, "cannot open " + path + ": " + std::strerror(errno));
    f.elf_.reset(elf_begin(f.fd_.get(), ELF_C_READ, nullptr));
    if (!f.elf_ || elf_kind(f.elf_.get()) != ELF_K_ELF) return fail(why, path + " is not an ELF file");
    return f;
  }
  // open(), throwing mcp::Error (runtime) with the reason.
  static ElfFile open_or_throw(const std::string& path) {
    std::string why;
    auto f = open(path, &why);
    if (!f) throw runtime_error(why);
    return std::move(*f);
  }
  ElfFile(ElfFile&&) noexcept = default;
  ElfFile& operator=(ElfFile&&) = delete;
  Elf* get() const { return elf_.get(); }

  // Calls fn(section name, note header, note name bytes, descriptor bytes) for each note of each
  // SHT_NOTE section until fn returns false. gelf_getnote bounds every note by its section's data,
  // so name[0..n_namesz) and desc[0..n_descsz) are inside the file's bytes.
  template <class Fn>
  void for_each_note(Fn&& fn) const {
    size_t shstrndx = 0;
    const bool names = elf_getshdrstrndx(elf_.get(), &shstrndx) == 0;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf_.get(), scn)) != nullptr) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
      const char* section = names ? elf_strptr(elf_.get(), shstrndx, sh.sh_name) : nullptr;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (!data || !data->d_buf) continue;
      const auto* base = static_cast<const char*>(data->d_buf);
      size_t offset = 0, name_off = 0, desc_off = 0;
      GElf_Nhdr nh;
      while ((offset = gelf_getnote(data, offset, &nh, &name_off, &desc_off)) > 0)
        if (!fn(section ? section : "", nh, base + name_off, base + desc_off)) return;
    }
  }

 private:
  ElfFile() = default;
  static std::nullopt_t fail(std::string* why, std::string text) {
    if (why) *why = std::move(text);
    return std::nullopt;
  }
  // Declared in this order so the Elf ends before its descriptor closes.
  UniqueFd fd_;
  UniqueHandle<Elf*, elf_end> elf_;
};

}  // namespace mcp::loader
