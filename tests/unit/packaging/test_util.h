// Helpers shared by the packaging tests: the package and image under test; commands, files and
// scratch directories are tests/support's.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <string>

#include "../../support/files.h"
#include "../../support/run_command.h"

namespace mcp::packaging_test {

using mcp::test::CommandResult;
using mcp::test::run_shell;

inline bool have_tool(const std::string& name) {
  return run_shell("command -v " + name).exit_code == 0;
}

using mcp::test::slurp;
using mcp::test::TempDir;
using mcp::test::write_file;

inline std::filesystem::path source_dir() { return MCP_SOURCE_DIR; }

// A .deb of this build tree, unpacked for one test suite (DebPackage, DebLint): the suite's
// SetUpTestSuite sets skip_reason or builds `deb` in a new `dir` and calls unpack(),
// TearDownTestSuite calls close(), and each test's SetUp calls require().
struct UnpackedDeb {
  std::string skip_reason;
  std::string cpack_output;
  std::filesystem::path deb;  // empty: CPack failed (cpack_output says why)
  CommandResult unpack_result;
  TempDir* dir = nullptr;

  std::filesystem::path root() const { return dir->path() / "root"; }
  void unpack() {
    if (!deb.empty()) unpack_result = run_shell("dpkg-deb -x '" + deb.string() + "' '" + root().string() + "'");
  }
  void close() {
    delete dir;
    dir = nullptr;
  }
  // Skips the test, or fails it, unless the package was built and unpacked.
  void require() const {
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
    ASSERT_FALSE(deb.empty()) << "cpack produced no .deb:\n" << cpack_output;
    ASSERT_EQ(unpack_result.exit_code, 0) << unpack_result.out;
  }
};

// Builds the .deb with CPack from the build tree `build_dir` into `out_dir`, and returns its
// path (empty on failure, with CPack's output in *log). -B keeps CPack's staging and output
// out of the shared build tree. With the Makefile generator CPack first builds the
// "preinstall" target, i.e. the whole tree; a test must not do that, so name a generator
// without that step: CPack then only runs the install scripts over the binaries built.
inline std::filesystem::path build_deb(const std::filesystem::path& build_dir, const std::filesystem::path& out_dir,
                                       std::string* log) {
  auto r = run_shell("cpack -G DEB --config " + (build_dir / "CPackConfig.cmake").string() + " -B " +
                       out_dir.string() + " -D CPACK_CMAKE_GENERATOR=Ninja");
  *log = r.out;
  if (r.exit_code != 0) return {};
  for (const auto& e : std::filesystem::directory_iterator(out_dir))
    if (e.path().extension() == ".deb") return e.path();
  return {};
}

// The .deb of this build tree, built once and kept in BUILD/tests/deb-cache/KEY for the
// other test processes (ctest runs every TEST in a process of its own, and a CPack run takes
// tens of seconds). KEY covers what goes into the package: the binaries, CPack's
// configuration and every file under packaging/, by size and modification time (and
// scripts/image, for the image built from it).
inline std::filesystem::path cached_deb(const std::filesystem::path& build_dir, std::string* log) {
  namespace fs = std::filesystem;
  std::string inputs;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    const auto t = fs::last_write_time(p, ec).time_since_epoch().count();
    const auto n = fs::is_regular_file(p, ec) ? fs::file_size(p, ec) : 0;
    inputs += p.string() + ":" + std::to_string(t) + ":" + std::to_string(n) + "\n";
  };
  for (const char* f : {"bin/mcp-agent", "bin/mcp-broker", "CPackConfig.cmake"}) add(build_dir / f);
  for (const auto& e : fs::recursive_directory_iterator(source_dir() / "packaging")) add(e.path());
  add(source_dir() / "cmake/packaging.cmake");
  add(source_dir() / "scripts/image");  // the image test keeps its archive next to the package
  const fs::path cache = build_dir / "tests/deb-cache";
  const fs::path dir = cache / std::to_string(std::hash<std::string>{}(inputs));
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".deb") return e.path();
  std::error_code ec;
  fs::remove_all(cache, ec);  // older packages
  fs::create_directories(cache);
  const fs::path staging = cache / "staging";
  const fs::path deb = build_deb(build_dir, staging, log);
  if (deb.empty()) return {};
  fs::create_directories(dir);
  fs::rename(deb, dir / deb.filename());
  fs::remove_all(staging, ec);
  return dir / deb.filename();
}

}  // namespace mcp::packaging_test
