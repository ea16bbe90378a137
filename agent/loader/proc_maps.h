// ProcMaps: the file-backed mappings of a process (/proc/PID/maps), to find which
// libraries it uses and to turn a runtime address into (file, file offset).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mcp::loader {

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  bool executable = false;
  std::string path;        // as the process names it (its mount namespace), " (deleted)" cut
  uint64_t dev = 0;        // makedev(major, minor) of the mapped file
  uint64_t inode = 0;
};

// Parses maps text (the format of /proc/PID/maps); lines that do not parse are skipped.
std::vector<Mapping> parse_proc_maps(const std::string& text);
// Reads /proc/PID/maps; empty when the process is gone or unreadable.
std::vector<Mapping> read_proc_maps(pid_t pid);

}  // namespace mcp::loader
