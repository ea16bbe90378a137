// What a process has used, from /proc: CPU time (utime + stime), resident memory (VmHWM,
// VmRSS) and context switches. For benchmarks that measure another process (a broker) from
// outside. Header-only.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace mcp::test {

// Seconds of CPU `pid` has used; 0 when it is gone.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return 0;
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Memory {
  double hwm_mib = 0;  // VmHWM: peak resident set
  double rss_mib = 0;  // VmRSS: now
};

inline Memory memory(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  Memory m;
  for (std::string line; std::getline(in, line);) {
    double* field = line.starts_with("VmHWM:") ? &m.hwm_mib : line.starts_with("VmRSS:") ? &m.rss_mib : nullptr;
    if (field) *field = std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // "VmRSS:   1234 kB"
  }
  return m;
}

// Voluntary plus involuntary context switches of every thread of `pid`.
inline uint64_t context_switches(pid_t pid) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "status");
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("voluntary_ctxt_switches:") || line.starts_with("nonvoluntary_ctxt_switches:"))
        total += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
  }
  return total;
}

}  // namespace mcp::test
