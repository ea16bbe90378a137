// Test support: BPF run statistics. While a BpfStats lives the kernel counts every BPF
// program's runs (BPF_ENABLE_STATS; the count stops when the last holder closes), and the
// agent's summary prints them ("mcp-agent: bpf program runs: name=N ..."), which
// program_runs() reads back. How many programs one traced call runs is how many traps
// it takes. Header-only.
#pragma once
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <regex>
#include <string>

namespace mcp::test {

class BpfStats {
 public:
  BpfStats() {
    union bpf_attr attr {};
    attr.enable_stats.type = BPF_STATS_RUN_TIME;
    fd_ = static_cast<int>(syscall(__NR_bpf, BPF_ENABLE_STATS, &attr, sizeof(attr)));
  }
  ~BpfStats() {
    if (fd_ >= 0) close(fd_);
  }
  BpfStats(const BpfStats&) = delete;
  BpfStats& operator=(const BpfStats&) = delete;
  bool enabled() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Program name -> runs, from the agent's summary on stderr.
inline std::map<std::string, uint64_t> program_runs(const std::string& err) {
  std::map<std::string, uint64_t> out;
  const auto at = err.find("mcp-agent: bpf program runs:");
  if (at == std::string::npos) return out;
  const std::string line = err.substr(at, err.find('\n', at) - at);
  static const std::regex pair(R"((\w+)=(\d+))");
  for (std::sregex_iterator it(line.begin(), line.end(), pair), end; it != end; ++it)
    out[(*it)[1]] = std::stoull((*it)[2]);
  return out;
}

inline uint64_t total_runs(const std::map<std::string, uint64_t>& runs) {
  uint64_t n = 0;
  for (const auto& [name, count] : runs) n += count;
  return n;
}

}  // namespace mcp::test
