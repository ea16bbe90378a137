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
  std::string binary;  // absolute path of the file
  std::string symbol;  // as given
  uint64_t offset = 0; // file offset of the function
};

// Splits "BINARY:SYMBOL" at the last ':' that is not part of "::" (C++ names).
// Throws a usage error for malformed specs.
std::pair<std::string, std::string> split_uprobe_spec(const std::string& spec);

// Whether a file name is the library `name`: "libc" matches libc.so.6 and libc-2.36.so.
bool library_name_matches(const std::string& file_name, const std::string& name);

// Parses `ldconfig -p` output into (soname, path) pairs.
std::vector<std::pair<std::string, std::string>> parse_ldconfig(const std::string& text);

// Resolves BINARY. pid (when > 0) is searched first. Throws when not found.
std::string resolve_binary(const std::string& binary, pid_t pid);

// Resolves a whole spec: binary and symbol offset. Throws "symbol S not found in B".
UprobeTarget resolve_uprobe(const std::string& spec, pid_t pid);

}  // namespace mcp::loader
