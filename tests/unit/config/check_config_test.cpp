#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/check_config.h"

namespace mcp::config {
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

TEST(CheckConfig, ValidFileExitsZeroWithSummary) {
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(MCP_EXAMPLE_CONFIG, out, err), 0);
  EXPECT_EQ(err.str(), "");
  EXPECT_NE(out.str().find(": ok (5 probes, 1 service strategies, 2 compliance rules)"), std::string::npos) << out.str();
}

TEST(CheckConfig, InvalidFileExitsTwoWithFileLineColumn) {
  Tmp f("probes:\n  - binary: /bin/true\n    symbol: main\n    sampling: {rate: 3}\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_check_config(f.path.string(), out, err), 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), f.path.string() + ":4:22: sampling.rate must be in (0, 1]\n");
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
