// Helpers shared by the packaging tests: run a shell command capturing output (stdout and
// stderr together); files and scratch directories are tests/support's.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../../support/files.h"

namespace mcp::packaging_test {

struct CommandResult {
  int status = -1;  // exit status, or -1 when it did not exit normally
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline bool have_tool(const std::string& name) {
  return run_command("command -v " + name).status == 0;
}

using mcp::test::slurp;
using mcp::test::TempDir;
using mcp::test::write_file;

inline std::filesystem::path source_dir() { return MCP_SOURCE_DIR; }

// Builds the .deb with CPack from the build tree `build_dir` into `out_dir`, and returns its
// path (empty on failure, with CPack's output in *log). -B keeps CPack's staging and output
// out of the shared build tree. With the Makefile generator CPack first builds the
// "preinstall" target, i.e. the whole tree; a test must not do that, so name a generator
// without that step: CPack then only runs the install scripts over the binaries built.
inline std::filesystem::path build_deb(const std::filesystem::path& build_dir, const std::filesystem::path& out_dir,
                                       std::string* log) {
  auto r = run_command("cpack -G DEB --config " + (build_dir / "CPackConfig.cmake").string() + " -B " +
                       out_dir.string() + " -D CPACK_CMAKE_GENERATOR=Ninja");
  *log = r.output;
  if (r.status != 0) return {};
  for (const auto& e : std::filesystem::directory_iterator(out_dir))
    if (e.path().extension() == ".deb") return e.path();
  return {};
}

}  // namespace mcp::packaging_test
