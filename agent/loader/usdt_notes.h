// USDT probes of one ELF file, from its .note.stapsdt notes (the SystemTap SDT format that
// <sys/sdt.h>, DTrace-compatible runtimes and libbpf's attach_usdt use): what `trace
// --list-usdt` prints and what a `--usdt BINARY:PROVIDER:NAME` is checked against before
// libbpf attaches it. The file is untrusted: a malformed note is skipped, never read past.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace mcp::loader {

struct UsdtProbe {
  std::string provider, name;
  uint64_t address = 0;    // the site's virtual address as the note records it
  uint64_t semaphore = 0;  // 0: none (the site always runs its nop)
  std::string args;        // argument specs, e.g. "8@%r14 8@%rax -4@%ebp"
  // Where a uprobe goes: the site's and the semaphore's offsets in the file (the note's
  // addresses moved by .stapsdt.base as the file was linked, then through the segment that
  // loads them). 0: the file loads no such address (site) or there is no semaphore.
  uint64_t file_offset = 0;
  uint64_t semaphore_offset = 0;
  // Arguments the site passes (the specs' count).
  size_t nargs() const;
};

// Every probe site of `path` in note order (one probe may have several sites). Throws
// mcp::Error (runtime) when the file cannot be read as ELF; a file without notes gives {}.
std::vector<UsdtProbe> read_usdt_probes(const std::string& path);

// Splits "PROVIDER:NAME" (a USDT probe named in a spec); throws a usage error when either is
// empty or there are more parts. Inline: the config reader checks names without libelf.
inline std::pair<std::string, std::string> split_usdt_name(const std::string& provider_and_name) {
  const auto colon = provider_and_name.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == provider_and_name.size() ||
      provider_and_name.find(':', colon + 1) != std::string::npos)
    throw usage_error("USDT probe must be PROVIDER:NAME, got '" + provider_and_name + "'");
  return {provider_and_name.substr(0, colon), provider_and_name.substr(colon + 1)};
}

}  // namespace mcp::loader
