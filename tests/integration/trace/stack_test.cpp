// --stack end to end: the real agent takes the stacks of kept events in the kernel and names
// them; the frames are checked against the workload's known call chain and against
// bpftrace's ustack on the same probe.
#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "../../support/files.h"
#include "../../support/run_command.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::run_command;
using mcp::test::TempDir;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

using mcp::test::real_path;
std::vector<nlohmann::json> trace_events(const std::vector<std::string>& flags, const std::vector<std::string>& cmd) {
  TempDir dir("mcp-stack");
  const std::string out = (dir.path() / "events").string();
  std::vector<std::string> argv = {kAgent, "trace", "-o", out};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return parse_json_lines(mcp::test::slurp(out));
}

// The frames of one event in the workload, as "sym+offset" from the innermost out, cut at the
// first frame outside it (libc's start code is named differently by each tool).
std::string workload_frames(const nlohmann::json& stack) {
  std::string out;
  for (const auto& f : stack) {
    if (f["module"] != real_path(kWorkload)) break;
    out += f["sym"].get<std::string>() + "+" + std::to_string(f["offset"].get<uint64_t>()) + "\n";
  }
  return out;
}

// mcp_recurse(4) from main: entries at depths 0 (called by main) to 3. The entry of depth d
// shows mcp_recurse+0, then d recursive return sites, then main. Kernels before 6.11 skip the
// direct caller at a function's entry (the frame pointer is still the caller's): there d-1
// return sites, and no main for the outermost call.
TEST(TraceStack, UserFramesAreNamedInTheWorkloadDownToMain) {
  MCP_REQUIRE_BPF();
  const auto events =
      trace_events({"--uprobe", kWorkload + ":mcp_recurse", "--stack", "user"}, {kWorkload, "recurse", "3", "4"});
  ASSERT_EQ(events.size(), 12u);
  ASSERT_TRUE(events[0].contains("stack")) << events[0];
  const bool caller_skipped = events[0]["stack"].size() < 2 || events[0]["stack"][1]["sym"] != "main";
  for (size_t i = 0; i < events.size(); i++) {
    const auto& e = events[i];
    ASSERT_TRUE(e.contains("stack")) << e;
    const auto& s = e["stack"];
    ASSERT_GE(s.size(), 2u) << e;
    EXPECT_EQ(s[0]["sym"], "mcp_recurse") << e;
    EXPECT_EQ(s[0]["offset"], 0) << e;
    EXPECT_EQ(s[0]["module"], real_path(kWorkload)) << e;
    const size_t depth = i % 4;  // 0: the outermost call
    size_t recursive = 0;
    for (size_t f = 1; f < s.size() && s[f]["sym"] == "mcp_recurse"; f++, recursive++) EXPECT_GT(s[f]["offset"], 0);
    if (!caller_skipped) {
      EXPECT_EQ(recursive, depth) << e;
      EXPECT_EQ(s[1 + recursive]["sym"], "main") << e;
    } else {
      EXPECT_EQ(recursive, depth == 0 ? 0 : depth - 1) << e;
      if (depth > 0) EXPECT_EQ(s[1 + recursive]["sym"], "main") << e;
    }
    // The text form the wire and OTLP carry names the same frames.
    EXPECT_NE(e["attributes"]["code.stacktrace"].get<std::string>().find("mcp_recurse+0x0 (" + real_path(kWorkload) + ")"),
              std::string::npos);
  }
}

TEST(TraceStack, SyscallKernelStackIsNamedFromKallsyms) {
  MCP_REQUIRE_BPF();
  const auto events = trace_events({"--syscall", "getppid", "--stack", "kernel"}, {kWorkload, "getppid", "20"});
  ASSERT_GE(events.size(), 20u);
  for (const auto& e : events) {
    ASSERT_TRUE(e.contains("stack")) << e;
    ASSERT_FALSE(e["stack"].empty()) << e;
    for (const auto& f : e["stack"]) {
      EXPECT_NE(f["sym"], "[unknown]") << e;
      EXPECT_EQ(f["module"], "[kernel]") << e;
    }
  }
}

TEST(TraceStack, OnlyProbesAskingForStacksCarryThem) {
  MCP_REQUIRE_BPF();
  const auto events = trace_events({"--uprobe", kWorkload + ":mcp_work"}, {kWorkload, "calls", "10"});
  ASSERT_EQ(events.size(), 10u);
  for (const auto& e : events) {
    EXPECT_FALSE(e.contains("stack")) << e;
    EXPECT_FALSE(e.contains("attributes")) << e;
  }
}

// bpftrace's ustack on the same probe and workload: where both unwind (the workload's own
// frames) they name the same functions at the same offsets, the same number of times.
TEST(TraceStack, WorkloadFramesAgreeWithBpftracesUstack) {
  MCP_REQUIRE_BPF();
  if (!std::filesystem::exists("/usr/bin/bpftrace")) GTEST_SKIP() << "bpftrace is not installed";
  const auto events =
      trace_events({"--uprobe", kWorkload + ":mcp_recurse", "--stack", "user"}, {kWorkload, "recurse", "5", "6"});
  ASSERT_EQ(events.size(), 30u);
  std::map<std::string, int> ours;
  for (const auto& e : events) ours[workload_frames(e["stack"])]++;
  EXPECT_EQ(ours.size(), 6u);  // one stack per depth
  // bpftrace names a stack when it prints it, from the live process's maps: printed at each
  // hit, the workload holding after mcp_done() until bpftrace has read them all and ends it.
  const std::string w = real_path(kWorkload);
  auto bt = run_command({"/usr/bin/bpftrace", "-e",
                         "uprobe:" + w + ":mcp_recurse { printf(\"%s\\n\", ustack); } uprobe:" + w +
                             ":mcp_done { exit(); }",
                         "-c", w + " recurse 5 6 hold"});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  // Each hit: "\n        mcp_recurse+0\n        main+1773\n        __libc_start_call_main+122\n\n"
  std::map<std::string, int> theirs;
  static const std::regex frame(R"(^\s+([^+\s]+)\+(\d+)$)");
  std::istringstream in(bt.out);
  std::string stack;
  bool inside = true;  // still in the workload's frames of the current stack
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, frame)) {
      const std::string sym = m[1];
      inside = inside && (sym == "mcp_recurse" || sym == "main");
      if (inside) stack += sym + "+" + std::string(m[2]) + "\n";
    } else if (line.empty() && !stack.empty()) {
      theirs[stack]++;
      stack.clear();
      inside = true;
    }
  }
  if (!stack.empty()) theirs[stack]++;
  EXPECT_EQ(ours, theirs) << bt.out;
}

}  // namespace
