// Runtime tier for CUDA (issue 3): the real agent traces the fixture built with
// the real CUDA toolkit. No GPU is present, so every call fails with a driver
// error (reported in ret) but the probes fire all the same.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../support/run_command.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::run_command;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";

std::string fixture(const std::string& variant) {
  return std::string(MCP_TEST_DIR) + "/cuda_launch_" + variant;
}

// Events go to a file of their own: the fixture prints on stdout too, and two writers of
// one file (`--output /dev/stdout` reopens it at offset 0) overwrite each other's bytes.
struct EventFile {
  std::string path;
  EventFile() {
    char tmpl[] = "/tmp/mcp-cuda-events-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd);
    path = tmpl;
  }
  ~EventFile() { unlink(path.c_str()); }
  std::vector<nlohmann::json> events() const { return parse_json_lines(mcp::test::slurp(path)); }
};

#define MCP_REQUIRE_FIXTURE(path)                                                            \
  do {                                                                                      \
    struct stat st;                                                                         \
    if (stat((path).c_str(), &st) != 0) GTEST_SKIP() << "CUDA toolkit (nvcc) not installed"; \
  } while (0)

class CudaLaunch : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLaunch, FiveNamedLaunchesWithTheirGeometryAndDriverError) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--output", out.path, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> launches, mallocs;
  for (const auto& line : out.events()) {
    ASSERT_EQ(line["kind"], "cuda");
    if (line["cuda"].contains("kernel")) launches.push_back(line);
    if (line["cuda"]["api"] == "cudaMalloc") mallocs.push_back(line);
  }
  ASSERT_EQ(launches.size(), 5u) << r.out << r.err;
  for (const auto& e : launches) {
    EXPECT_EQ(e["cuda"]["api"], "cudaLaunchKernel");
    EXPECT_EQ(e["cuda"]["kernel"], "vecAdd(float*, int)");
    EXPECT_EQ(e["cuda"]["grid"], nlohmann::json({4, 2, 1}));
    EXPECT_EQ(e["cuda"]["block"], nlohmann::json({64, 1, 1}));
    EXPECT_EQ(e["cuda"]["shared_mem"], 0);
    EXPECT_NE(e["ret"], 0) << "no GPU: the launch must report the driver error";
    EXPECT_GT(e["duration_ns"].get<uint64_t>(), 0u);
    EXPECT_FALSE(e["cuda"].contains("slow_mode")) << "failed launches take microseconds, far under 85 ms";
    EXPECT_EQ(e["comm"], ("cuda_launch_" + GetParam()).substr(0, 15));  // comm holds 15 bytes
  }
  ASSERT_EQ(mallocs.size(), 1u);
  EXPECT_EQ(mallocs[0]["cuda"]["bytes"], 1024);
  EXPECT_NE(r.err.find("vecAdd(float*, int)"), std::string::npos) << "per-kernel summary: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(Runtimes, CudaLaunch, ::testing::Values("shared", "static"));

TEST(CudaSlowLaunch, SlowLaunchesSwitchTheProcessToRateOneWithUserStacks) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture("shared");
  MCP_REQUIRE_FIXTURE(bin);
  // Every launch is "slow" at 1 ns; the base rate is tiny, so only slow mode keeps launches 2..5.
  const EventFile out;
  auto r = run_command(
      {kAgent, "trace", "--cuda", "--slow-launch", "1ns", "--sample-rate", "0.000001", "--output", out.path, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int slow = 0;
  for (const auto& e : out.events()) {
    if (!e["cuda"].contains("kernel")) continue;
    EXPECT_TRUE(e["cuda"].value("slow_mode", false));
    EXPECT_FALSE(e["cuda"]["user_stack"].empty());
    EXPECT_EQ(e["weight"], 1.0);
    slow++;
  }
  // The first launch is sampled out at 1e-6 but timed; being slow it is kept and
  // switches the process to slow mode, so all five are kept.
  EXPECT_EQ(slow, 5);
}

}  // namespace
