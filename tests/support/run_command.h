// Test support: run a command, capture stdout and stderr, and read the agent's
// JSON lines and summary table. Header-only; used by the integration and e2e tiers.
#pragma once
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "files.h"

namespace mcp::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline CommandResult run_command(const std::vector<std::string>& argv) {
  const TempDir dir;
  const std::string out = dir / "out", err = dir / "err";
  std::string cmd;
  for (const auto& a : argv) cmd += shell_quote(a) + " ";
  cmd += ">" + out + " 2>" + err + " </dev/null";
  const int st = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// A shell command line, its stdout and stderr together in `out` (for tools that interleave them).
inline CommandResult run_shell(const std::string& command) {
  return run_command({"/bin/sh", "-c", command + " 2>&1"});
}

// The complete lines of `text`, each parsed as JSON. Text after the last newline is a line the
// process is still writing (tests read a running agent's output) and is left out; the agent
// ends every line, so an exact count still catches a truncated one.
inline std::vector<nlohmann::json> parse_json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text.substr(0, text.rfind('\n') + 1));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct SummaryRow {
  uint64_t seen = 0, kept = 0, lost = 0, quota_dropped = 0, orphaned = 0, delivered = 0;
  double estimated = 0;  // -1: the agent printed no estimate ("-")
};

// Rows of the summary table the agent prints on stderr, keyed by probe name.
inline std::map<std::string, SummaryRow> parse_summary(const std::string& err) {
  std::map<std::string, SummaryRow> rows;
  // PROBE SEEN KEPT LOST QUOTA_DROP ORPHANED DELIVERED EST_COUNT
  static const std::regex row(R"(^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([0-9.]+|-)\s*$)");
  std::istringstream in(err);
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_match(line, m, row))
      rows[m[1]] = {std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4]), std::stoull(m[5]), std::stoull(m[6]),
                    std::stoull(m[7]), m[8] == "-" ? -1.0 : std::stod(m[8])};
  return rows;
}

// Why a test that loads BPF cannot run here, or empty when it can.
inline std::string bpf_unavailable_reason() {
  if (geteuid() != 0) return "needs root to load BPF programs";
  struct stat st;
  if (stat("/sys/kernel/btf/vmlinux", &st) != 0) return "kernel has no BTF (/sys/kernel/btf/vmlinux)";
  return {};
}

#define MCP_REQUIRE_BPF()                                              \
  do {                                                                 \
    if (auto why = ::mcp::test::bpf_unavailable_reason(); !why.empty()) \
      GTEST_SKIP() << why;                                             \
  } while (0)

}  // namespace mcp::test
