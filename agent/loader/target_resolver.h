// Target resolution: turns the BINARY of `--uprobe BINARY:SYMBOL` into a file and
// the SYMBOL into the offset a uprobe attaches at. BINARY is a path, a library
// name ("libc", "libc.so.6", "libcudart") looked up in the target process's maps
// and then the linker cache, or a program name looked up in PATH.
// Errors are mcp::Error (runtime) whose message names the binary.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mcp::loader {

struct UprobeTarget {
  std::string binary;  // absolute path of the file as the agent opens it (maybe /proc/PID/root/...)
  std::string symbol;  // as given
  uint64_t offset = 0; // file offset of the function
  std::string shown;   // the path as the user and the target name it; empty: binary
  // A USDT probe: symbol is "PROVIDER:NAME", offset unused (libbpf's attach_usdt finds
  // every site and its semaphore from the file's notes).
  bool usdt = false;
  // The symbol is an IFUNC resolver (ElfSymbol::ifunc): it runs once per process, not per call.
  bool ifunc = false;
  const std::string& name() const { return shown.empty() ? binary : shown; }
  std::string probe_name() const;
};

// A uprobe's or USDT probe's name: "/usr/bin/x:fn", or "usdt:/usr/bin/python3.11:python:line".
inline std::string file_probe_name(const std::string& file, const std::string& symbol, bool usdt) {
  return (usdt ? "usdt:" : "") + file + ":" + symbol;
}
inline std::string UprobeTarget::probe_name() const { return file_probe_name(name(), symbol, usdt); }

// Splits "BINARY:SYMBOL" at the last ':' that is not part of "::" (C++ names).
// Throws a usage error for malformed specs.
std::pair<std::string, std::string> split_uprobe_spec(const std::string& spec);

// Whether a file name is the library `name`: "libc" matches libc.so.6 and libc-2.36.so.
bool library_name_matches(const std::string& file_name, const std::string& name);

// Parses `ldconfig -p` output into (soname, path) pairs.
std::vector<std::pair<std::string, std::string>> parse_ldconfig(const std::string& text);

// Resolves BINARY. pid (when > 0) is searched first. Throws when not found.
// For a pid whose root differs from the agent's (another mount namespace or chroot), a path, or
// a library from its maps, is resolved inside /proc/PID/root, symlinks included, and the result
// starts with /proc/PID/root: the agent probes the file the process sees at that path.
std::string resolve_binary(const std::string& binary, pid_t pid);
// The same, but nullopt when there is no such file (yet): a daemon probe then waits for it.
std::optional<std::string> find_binary(const std::string& binary, pid_t pid);

// Which file a path names now (stat, following symlinks): a replaced file has a new inode;
// a file still being written has a new version (size and modification time).
struct FileId {
  uint64_t dev = 0, ino = 0;
  uint64_t version = 0;
  bool same_inode(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> file_id(const std::string& path);

// Checks that `file` can be a uprobe target: an ELF file holding `symbol`. Throws
// mcp::Error (runtime) "FILE is not an ELF file: ..." or "symbol S not found in FILE".
UprobeTarget uprobe_target_in(const std::string& file, const std::string& symbol);
// The same for many functions of one file, read once: nullopt where one is absent.
std::vector<std::optional<UprobeTarget>> uprobe_targets_in(const std::string& file,
                                                           const std::vector<std::string>& symbols);

// `path` resolved within the root of `pid` ("/proc/PID/root/..." with no symlink left), or
// realpath(path) when pid's root is the agent's own. Empty when it does not exist there.
std::string path_in_root_of(pid_t pid, const std::string& path);
// The path inside the root for a file opened through a process's root ("/usr/bin/x" for
// "/proc/PID/root/usr/bin/x", as path_in_root_of() gives them); "" for any other path.
std::string path_under_proc_root(const std::string& path);

// Empty when process `pid` maps `file` (same inode, and device or path as it names it); else a
// warning that the probe on `file` may never fire in that process.
std::string mapping_warning(pid_t pid, const std::string& file, const std::string& shown);

// Whether a uprobe's SYMBOL is a glob pattern (*, ? or [) rather than a name.
bool is_symbol_pattern(const std::string& symbol);
// Every function of BINARY whose name matches `pattern` (ElfSymbols::functions_matching),
// resolved as resolve_uprobe would resolve each. Throws mcp::Error (runtime) "no function of
// FILE matches PATTERN".
std::vector<UprobeTarget> resolve_uprobe_pattern(const std::string& binary, const std::string& pattern, pid_t pid);

// "BINARY:PROVIDER:NAME" (--usdt) -> {BINARY, "PROVIDER:NAME"}; throws a usage error when malformed.
std::pair<std::string, std::string> split_usdt_spec(const std::string& spec);
// Checks that `file` declares the USDT probe "PROVIDER:NAME". Throws mcp::Error (runtime)
// "USDT probe P:N not found in FILE" (naming `trace --list-usdt`).
UprobeTarget usdt_target_in(const std::string& file, const std::string& provider_and_name);
// uprobe_target_in, or usdt_target_in for a USDT probe.
UprobeTarget probe_target_in(const std::string& file, const std::string& symbol, bool usdt);
// resolve_uprobe for "BINARY:PROVIDER:NAME".
UprobeTarget resolve_usdt(const std::string& spec, pid_t pid);

// Resolves a whole spec: binary and symbol offset. Throws "symbol S not found in B".
// With a pid in another mount namespace, `binary` is under /proc/PID/root and `shown` is the path.
UprobeTarget resolve_uprobe(const std::string& spec, pid_t pid);

}  // namespace mcp::loader
