// Runtime tier for time (issue 5): event ts_ns from the calibrated kernel clock
// mapping lands inside the workload's own CLOCK_REALTIME bracket of each call,
// and the HLC is strictly increasing along the event stream.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../../support/run_command.h"

namespace {

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

TEST(WallClock, EventTimestampsFallInsideTheCallersRealtimeBracket) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 2000;
  constexpr uint64_t kSlackNs = 50000;
  const auto brackets_file = std::filesystem::temp_directory_path() / ("mcp-rt-" + std::to_string(getpid()));
  auto r = mcp::test::run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--", kWorkload,
                                   "realtime", std::to_string(kCalls), brackets_file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(brackets_file);
  std::vector<std::pair<uint64_t, uint64_t>> brackets;
  uint64_t before, after;
  while (in >> before >> after) brackets.emplace_back(before, after);
  std::filesystem::remove(brackets_file);
  auto events = mcp::test::parse_json_lines(r.out);
  ASSERT_EQ(events.size(), static_cast<size_t>(kCalls));
  ASSERT_EQ(brackets.size(), static_cast<size_t>(kCalls));
  int inside = 0;
  uint64_t last_hlc = 0;
  for (int i = 0; i < kCalls; i++) {
    ASSERT_EQ(events[i]["args"][0], i);  // event i is call i
    const uint64_t ts = events[i]["ts_ns"];
    if (ts + kSlackNs >= brackets[i].first && ts <= brackets[i].second + kSlackNs) inside++;
    const uint64_t hlc = events[i]["hlc"];
    EXPECT_GT(hlc, last_hlc);
    last_hlc = hlc;
    // The HLC's 48-bit millisecond part never runs behind the event's wall time.
    EXPECT_GE((hlc >> 16) + 1, ts / 1000000);
  }
  EXPECT_GE(inside, kCalls * 99 / 100) << inside << " of " << kCalls << " inside [before-50us, after+50us]";
}

}  // namespace
