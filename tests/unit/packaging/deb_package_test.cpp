// Builds the .deb with CPack from this build tree, unpacks it, and runs the packaged
// binary: what an operator installs must start. Integration tier: it needs mcp-agent and
// mcp-broker built in this tree, and skips with the reason when they are not.
#include <gtest/gtest.h>

#include "test_util.h"

namespace mcp::packaging_test {
namespace {

namespace fs = std::filesystem;

const fs::path kBinDir = MCP_BIN_DIR;
const fs::path kBuildDir = kBinDir.parent_path();

class DebPackage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (std::string tool : {"cpack", "dpkg-deb"}) {
      if (!have_tool(tool)) skip_reason_ = tool + " not installed";
    }
    for (std::string bin : {"mcp-agent", "mcp-broker"}) {
      if (!fs::exists(kBinDir / bin)) {
        skip_reason_ = bin + " is not built in " + kBinDir.string() +
                       " (the package installs it; build it first, with MCP_BUILD_BPF=ON)";
      }
    }
    if (!fs::exists(kBuildDir / "CPackConfig.cmake")) skip_reason_ = "no CPackConfig.cmake";
    if (!skip_reason_.empty()) return;
    dir_ = new TempDir();
    deb_ = build_deb(kBuildDir, dir_->path(), &cpack_output_);
    if (!deb_.empty()) {
      root_ = dir_->path() / "root";
      unpack_ = run_command("dpkg-deb -x " + deb_.string() + " " + root_.string());
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_FALSE(deb_.empty()) << "cpack produced no .deb:\n" << cpack_output_;
    ASSERT_EQ(unpack_.status, 0) << unpack_.output;
  }
  static std::string field(const std::string& name) {
    auto r = run_command("dpkg-deb -f " + deb_.string() + " " + name);
    return r.output;
  }

  static inline std::string skip_reason_;
  static inline TempDir* dir_ = nullptr;
  static inline std::string cpack_output_;
  static inline fs::path deb_;
  static inline fs::path root_;
  static inline CommandResult unpack_;
};

TEST_F(DebPackage, PackagedAgentRunsAndPrintsItsVersion) {
  auto r = run_command((root_ / "usr/bin/mcp-agent").string() + " version");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("mcp-agent ") + MCP_VERSION), std::string::npos) << r.output;
}

TEST_F(DebPackage, ContainsBinariesUnitsAndDocs) {
  for (std::string path : {"usr/bin/mcp-agent", "usr/bin/mcp-broker",
                           "lib/systemd/system/mcp-agent.service",
                           "lib/systemd/system/mcp-broker.service",
                           "usr/share/doc/mcp-sampling/k8s/agent-daemonset.yaml",
                           "usr/share/doc/mcp-sampling/examples/agent.yaml"}) {
    EXPECT_TRUE(fs::exists(root_ / path)) << path;
  }
  EXPECT_EQ(slurp(root_ / "lib/systemd/system/mcp-agent.service"),
            slurp(source_dir() / "packaging/systemd/mcp-agent.service"));
}

TEST_F(DebPackage, DefaultConfigIsAConffileTheAgentAccepts) {
  fs::path source = source_dir() / "packaging/config/agent.yaml";
  if (!fs::exists(source)) GTEST_SKIP() << "packaging/config/agent.yaml not written yet";
  fs::path packaged = root_ / "etc/mcp-agent/agent.yaml";
  ASSERT_TRUE(fs::exists(packaged));
  auto control = dir_->path() / "control";
  ASSERT_EQ(run_command("dpkg-deb -e " + deb_.string() + " " + control.string()).status, 0);
  EXPECT_NE(slurp(control / "conffiles").find("/etc/mcp-agent/agent.yaml"), std::string::npos)
      << "an operator's edits would be overwritten on upgrade";
  auto help = run_command((root_ / "usr/bin/mcp-agent").string() + " --help");
  if (help.output.find("check-config") == std::string::npos) {
    GTEST_SKIP() << "conffile checked; mcp-agent has no check-config subcommand yet to validate it";
  }
  auto r = run_command((root_ / "usr/bin/mcp-agent").string() + " check-config " + packaged.string());
  EXPECT_EQ(r.status, 0) << "the packaged default config is rejected by the packaged agent:\n" << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << "the default must need nothing this host lacks:\n"
                                                         << r.output;
}

// The annotated example moved to the docs; the packaged agent accepts it (its example
// binaries are absent here: warnings, exit 0).
TEST_F(DebPackage, AnnotatedExampleIsInTheDocsAndTheAgentAcceptsIt) {
  fs::path example = root_ / "usr/share/doc/mcp-sampling/examples/agent.yaml";
  ASSERT_TRUE(fs::exists(example));
  EXPECT_EQ(slurp(example), slurp(source_dir() / "packaging/config/agent.example.yaml"));
  auto r = run_command((root_ / "usr/bin/mcp-agent").string() + " check-config " + example.string());
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(DebPackage, ControlNamesThePackageVersionAndRuntimeLibraries) {
  EXPECT_EQ(field("Package"), "mcp-sampling\n");
  EXPECT_EQ(field("Version"), std::string(MCP_VERSION) + "\n");
  std::string depends = field("Depends");
  for (std::string lib : {"libbpf1", "libelf1"}) {
    EXPECT_NE(depends.find(lib), std::string::npos) << "Depends: " << depends;
  }
}

}  // namespace
}  // namespace mcp::packaging_test
