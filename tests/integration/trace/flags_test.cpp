// Runtime tier: the real mcp-agent binary against what issue 51 found accepted silently, or
// written through links another user planted. Each refusal is one line on stderr with the
// exit code of its kind (2: usage, 1: runtime), before anything is sent or written.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "../../support/files.h"
#include "../../support/run_command.h"

namespace {

using mcp::test::run_command;
using mcp::test::TempDir;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";

void expect_one_line(const std::vector<std::string>& args, int code, const std::string& line) {
  std::vector<std::string> argv{kAgent};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, code) << args[0] << " " << args.back() << ": " << r.err;
  EXPECT_EQ(r.err, "mcp-agent: " + line + "\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(TraceFlags, ValuesOnceAcceptedSilentlyAreOneUsageLine) {
  const std::string id300(300, 'x');
  expect_one_line({"trace", "-s", "getppid", "--max-events", "-1"}, 2,
                  "--max-events must be 0 (no limit) to 2^63-1, got -1");
  expect_one_line({"trace", "-s", "getppid", "--wakeup-bytes", "-1"}, 2,
                  "--wakeup-bytes must be 1 to 1G (1073741824), got -1");
  expect_one_line({"trace", "-s", "getppid", "--wakeup-bytes", "1099511627776"}, 2,
                  "--wakeup-bytes must be 1 to 1G (1073741824), got 1099511627776");
  expect_one_line({"trace", "--usdt", "/bin/true:prov:name", "--latency"}, 2,
                  "--latency applies to --uprobe and --syscall probes (a USDT probe has no return; CUDA launches take "
                  "--cuda-latency)");
  expect_one_line({"trace", "-s", "getppid", "--agent-id", "a b|c"}, 2,
                  "--agent-id 'a b|c': agent id must be printable ASCII without spaces or '|'");
  expect_one_line({"trace", "-s", "getppid", "--agent-id", id300}, 2,
                  "--agent-id '" + id300 + "': agent id longer than 256 bytes");
  const auto empty = run_command({kAgent, "trace", "-u", "/bin/true:main", "--trace-id-arg", "0:hex32",
                                  "--trace-id-prefix", ""});
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_EQ(empty.err.rfind("mcp-agent: --trace-id-prefix", 0), 0u) << empty.err;
  EXPECT_EQ(std::count(empty.err.begin(), empty.err.end(), '\n'), 1) << empty.err;
}

// Checked before connecting: no broker listens on port 1.
TEST(PolicyFlags, AnEmptyTraceIdPrefixIsRefusedNotAppliedToTheWholeProbe) {
  expect_one_line({"policy", "apply", "--broker", "127.0.0.1:1", "--service", "api", "--sampling-rate", "0.5",
                   "--trace-id-prefix", ""},
                  2, "--trace-id-prefix: a trace-id prefix is 1 to 32 hex digits");
}

TEST(TokenFile, OneEveryUserCanReadIsRefusedAsSshRefusesSuchAKey) {
  const TempDir dir;
  const std::string token = dir.write("token", "s3cret\n").string();
  ASSERT_EQ(chmod(token.c_str(), 0644), 0);
  expect_one_line({"policy", "list", "--broker", "127.0.0.1:1", "--token-file", token}, 2,
                  "token file '" + token + "' is readable by every user (mode 0644): chmod o-r, e.g. 0600");
}

// The spool and the ready file are written once probes are attached: these need BPF.
TEST(TraceFiles, ADirectoryOthersCanPlantLinksInStopsTheRunWithOneLine) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string open = dir / "open";
  std::filesystem::create_directory(open);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  const std::string why = ": it is writable by group or others without the sticky bit (mode 0777), so another user "
                          "can plant links where we write (chmod go-w)";
  // The run's agent id is kept in the spool directory: that is the first file written there.
  expect_one_line({"trace", "--syscall", "getppid", "--broker", "127.0.0.1:1", "--spool-dir", open, "--", "true"}, 1,
                  "agent id: refusing directory " + open + why);
  expect_one_line({"trace", "--syscall", "getppid", "--broker", "127.0.0.1:1", "--agent-id", "node-1", "--spool-dir",
                   open, "--", "true"},
                  1, "spool: refusing directory " + open + why);
  expect_one_line({"trace", "--syscall", "getppid", "--ready-file", open + "/ready", "--no-summary", "--", "true"},
                  1, "ready file: refusing directory " + open + why);
  EXPECT_TRUE(std::filesystem::is_empty(open));
}

// Issue 51: two names of one function (libc's strtoll and strtoq) are one probe, said in a
// line, so one call is one event; an IFUNC resolver (strlen) is probed with a warning that it
// sees almost none of the calls.
TEST(TraceFlags, AliasesAreProbedOnceAndAnIfuncResolverIsWarnedAbout) {
  MCP_REQUIRE_BPF();
  const auto r = run_command({kAgent, "trace", "-u", "libc:strtoll", "-u", "libc:strtoq", "-u", "libc:strlen",
                              "--duration", "50ms", "-o", "/dev/null"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("strtoq is strtoll (the same address): probed once"), std::string::npos) << r.err;
  EXPECT_FALSE(std::regex_search(r.err, std::regex(R"(:strtoq\s+\d)"))) << "no summary row of its own: " << r.err;
  EXPECT_NE(r.err.find("strlen is an IFUNC resolver"), std::string::npos) << r.err;
}

}  // namespace
