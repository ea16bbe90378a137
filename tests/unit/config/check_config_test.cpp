#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands/check_config.h"

namespace mcp::config {
using commands::add_check_config_command;
using commands::run_check_config;
namespace {

namespace fs = std::filesystem;

struct Tmp {
  fs::path path;
  explicit Tmp(const std::string& text) {
    char tmpl[] = "/tmp/mcp-check-XXXXXX.yaml";
    const int fd = mkstemps(tmpl, 5);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~Tmp() { fs::remove(path); }
};

TEST(CheckConfig, PackagedDefaultIsValidWithNothingToWaitFor) {
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(MCP_DEFAULT_CONFIG, out, err), 0);
  EXPECT_EQ(err.str(), "") << "the packaged default must work on any host as installed";
  EXPECT_NE(out.str().find(": ok (3 probes, 0 service strategies, 0 compliance rules)"), std::string::npos) << out.str();
}

// The annotated example names binaries no ordinary host has: warnings (they would wait),
// never errors.
TEST(CheckConfig, AnnotatedExampleIsValidAndItsAbsentBinariesAreWarnings) {
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(MCP_EXAMPLE_CONFIG, out, err), 0) << err.str();
  EXPECT_NE(out.str().find(": ok (6 probes, 1 service strategies, 2 compliance rules"), std::string::npos) << out.str();
  std::istringstream lines(err.str());
  for (std::string line; std::getline(lines, line);)
    EXPECT_NE(line.find(": warning: "), std::string::npos) << line;
  EXPECT_NE(err.str().find(":39:5: warning: /usr/local/bin/checkout not found on this host; the probe will wait for it"),
            std::string::npos)
      << err.str();
}

TEST(CheckConfig, AbsentBinaryIsAWarningAndExitZero) {
  Tmp f("probes:\n  - binary: /nonexistent/app\n    symbol: main\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 0);
  EXPECT_EQ(err.str(), f.path.string() + ":2:5: warning: /nonexistent/app not found on this host; the probe will wait for it\n");
  EXPECT_NE(out.str().find("1 waiting"), std::string::npos) << out.str();
}

// A container probe's binary is a path inside containers: the host's file system says nothing
// about it (here the host path is not even ELF), so there is nothing to warn about.
TEST(CheckConfig, ContainerProbePathIsNotLookedUpOnTheHost) {
  Tmp f("probes:\n  - binary: /etc/hostname\n    symbol: main\n    container: {namespace: shop}\n"
        "  - binary: /nonexistent/app\n    symbol: main\n    container: {}\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
  EXPECT_NE(out.str().find(": ok (2 probes, 0 service strategies, 0 compliance rules)"), std::string::npos) << out.str();
}

TEST(CheckConfig, FileThatIsNotElfIsAnError) {
  Tmp target("#!/bin/sh\n");
  Tmp f("probes:\n  - binary: " + target.path.string() + "\n    symbol: main\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 2);
  EXPECT_EQ(err.str(), f.path.string() + ":2:5: " + target.path.string() + " is not an ELF file\n");
}

TEST(CheckConfig, MissingSymbolIsAnError) {
  Tmp f("probes:\n  - binary: /proc/self/exe\n    symbol: no_such_function_here\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 2);
  EXPECT_NE(err.str().find(":2:5: symbol no_such_function_here not found in "), std::string::npos) << err.str();
}

TEST(CheckConfig, InvalidFileExitsTwoWithFileLineColumn) {
  Tmp f("probes:\n  - binary: /bin/true\n    symbol: main\n    sampling: {rate: 3}\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), f.path.string() + ":4:22: sampling.rate must be in [1e-6, 1]\n");
}

TEST(CheckConfig, MissingFileExitsTwo) {
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config("/nonexistent/agent.yaml", out, err), 2);
  EXPECT_NE(err.str().find("/nonexistent/agent.yaml: cannot read"), std::string::npos);
}

TEST(CheckConfig, SubcommandRegistersAndRunsThroughTheAction) {
  Tmp f("services:\n  - service: a\n    strategy: weighted\n    target_qps: 5\n    weights: {v1: 80, v2: 10}\n");
  CLI::App app;
  CommandAction action;
  add_check_config_command(app, action);
  std::vector<std::string> args = {f.path.string(), "check-config"};  // CLI11 parses reversed vectors
  app.parse(args);
  ASSERT_TRUE(action);
  testing::internal::CaptureStderr();
  const int rc = action();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(err, f.path.string() + ":5:14: weights sum to 90, must sum to 100\n");
}

TEST(CheckConfig, SubcommandRequiresAFile) {
  CLI::App app;
  CommandAction action;
  add_check_config_command(app, action);
  std::vector<std::string> args = {"check-config"};
  EXPECT_THROW(app.parse(args), CLI::RequiredError);
}

}  // namespace
}  // namespace mcp::config
