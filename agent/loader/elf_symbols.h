// ElfSymbols: the function symbols of one ELF file (.symtab and .dynsym), for
// turning a symbol name into the file offset a uprobe attaches at, and a code
// address back into a (demangled) name. Loaded once per file; immutable after.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mcp::loader {

struct ElfSymbol {
  std::string name;    // as in the file (mangled for C++)
  uint64_t vaddr = 0;  // st_value
  uint64_t size = 0;
  // STT_GNU_IFUNC: the symbol is a resolver the dynamic linker runs once per process to
  // pick an implementation (libc's strlen, memcpy): a probe on it sees no call.
  bool ifunc = false;
};

class ElfSymbols {
 public:
  // Throws mcp::Error (runtime) when the file cannot be read as ELF.
  static ElfSymbols load(const std::string& path);

  // File offset of the function `name` (exact symbol name, or demangled name), for
  // uprobe attachment; nullopt when absent.
  std::optional<uint64_t> file_offset_of(std::string_view name) const;
  // Function names (as in the file, once each, sorted) matching the shell glob `pattern`
  // (fnmatch: *, ?, [...]) as written or demangled, as bpftrace's uprobe wildcards match.
  std::vector<std::string> functions_matching(const std::string& pattern) const;
  // Whether `name` (exact) is an IFUNC resolver (ElfSymbol::ifunc).
  bool is_ifunc(std::string_view name) const;
  // Symbol whose [vaddr, vaddr+size) holds `vaddr`, or nullptr.
  const ElfSymbol* symbol_at(uint64_t vaddr) const;
  // Converts an offset in the file to the virtual address its segment maps it at.
  std::optional<uint64_t> file_offset_to_vaddr(uint64_t offset) const;
  // Whether the file is position independent (ET_DYN): load bias applies.
  bool is_pie() const { return is_dyn_; }
  const std::string& path() const { return path_; }
  // DT_NEEDED entries (shared libraries the file links against).
  const std::vector<std::string>& needed() const { return needed_; }
  size_t size() const { return symbols_.size(); }

 private:
  struct Segment {
    uint64_t vaddr, offset, filesz;
  };
  std::optional<uint64_t> vaddr_to_file_offset(uint64_t vaddr) const;

  std::string path_;
  bool is_dyn_ = false;
  std::vector<ElfSymbol> symbols_;  // sorted by vaddr
  std::vector<Segment> exec_segments_;
  std::vector<std::string> needed_;
};

// A file's GNU build id as lowercase hex, reading only its notes; empty when it has none or
// cannot be read as ELF.
std::string read_build_id(const std::string& path);

// "_Z6vecAddPfi" -> "vecAdd(float*, int)"; names that are not mangled come back as is.
std::string demangle(const std::string& name);

}  // namespace mcp::loader
