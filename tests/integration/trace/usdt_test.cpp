// USDT probes end to end: the real agent attaches (itself through uprobe_multi links where the
// kernel has them, else through libbpf's USDT support) to the workload's <sys/sdt.h> probes and
// to Debian's python3 (its python:line probe), and what it prints is checked against what
// those programs did.
#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <set>

#include "../../support/files.h"
#include "../../support/process.h"
#include "../../support/run_command.h"
#include "loader/usdt_notes.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::parse_summary;
using mcp::test::run_command;
using mcp::test::TempDir;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";
const std::string kPython = "/usr/bin/python3.11";

using mcp::test::real_path;
std::string usdt_probe(const std::string& name) { return "usdt:" + real_path(kWorkload) + ":mcp:" + name; }

std::vector<nlohmann::json> read_events(const std::string& file) { return parse_json_lines(mcp::test::slurp(file)); }

TEST(TraceUsdt, RateOneDeliversEveryHitWithItsArgumentsAndStrings) {
  MCP_REQUIRE_BPF();
  constexpr int kHits = 1000;
  TempDir dir("mcp-usdt");
  const std::string events_file = (dir.path() / "events").string();
  // arg1 is a string, arg2 an address nothing maps: its read fails, the value stays in args.
  auto r = run_command({kAgent, "trace", "--usdt", kWorkload + ":mcp:tick", "--string-arg", "1", "--string-arg", "2",
                        "-o", events_file, "--", kWorkload, "usdt", std::to_string(kHits)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = read_events(events_file);
  ASSERT_EQ(events.size(), static_cast<size_t>(kHits));
  for (int i = 0; i < kHits; i++) {
    const auto& e = events[i];
    EXPECT_EQ(e["kind"], "usdt");
    EXPECT_EQ(e["probe"], usdt_probe("tick"));
    EXPECT_EQ(e["args"].size(), 4u) << e;  // the note declares four
    EXPECT_EQ(e["args"][0], i);
    EXPECT_EQ(e["args"][2], 16);
    EXPECT_EQ(e["attributes"], nlohmann::json({{"arg1", (i % 2 ? "odd-" : "even-") + std::to_string(i)}})) << e;
  }
  const auto row = parse_summary(r.err)[usdt_probe("tick")];
  EXPECT_EQ(row.seen, static_cast<uint64_t>(kHits));
  EXPECT_EQ(row.kept, static_cast<uint64_t>(kHits));
  EXPECT_EQ(row.delivered, static_cast<uint64_t>(kHits));
}

// Issue 51, finding 6: a probe of 2,048 sites, each with its own argument spec (libbpf's 1,024
// specs refused it: "Argument list too long"), and 1,280 distinct probes, attached as one
// uprobe_multi link each: every site counts its own hits, and the agent is done in seconds
// (libbpf's per-site perf uprobes took ~0.1 s each to detach, 200 s here).
TEST(TraceUsdt, ThousandsOfSitesAndOverAThousandProbesCountEachHitAndDetachAtOnce) {
  MCP_REQUIRE_BPF();
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) == 0) sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 6 || (major == 6 && minor < 6)) GTEST_SKIP() << "no uprobe_multi links before Linux 6.6";
  const std::string many = std::string(MCP_TEST_DIR) + "/mcp-many-usdt";
  const std::string file = real_path(many);
  TempDir dir("mcp-usdt-many");
  const std::string events_file = (dir.path() / "events").string();
  const auto started = std::chrono::steady_clock::now();
  auto r = run_command({kAgent, "trace", "--usdt", many + ":mcp:site", "-o", events_file, "--", many, "3"});
  const double sites_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int64_t, int> hits;
  for (const auto& e : read_events(events_file)) hits[e["args"][0].get<int64_t>()]++;
  ASSERT_EQ(hits.size(), 2048u);
  for (const auto& [site, n] : hits) {
    EXPECT_EQ(n, 3) << "site " << site;
    EXPECT_TRUE(site >= 0 && site < 2048) << site;
  }
  EXPECT_EQ(parse_summary(r.err)["usdt:" + file + ":mcp:site"].seen, 3u * 2048u);
  EXPECT_LT(sites_s, 60) << "2,048 sites took " << sites_s << " s to attach, run and detach";

  std::vector<std::string> argv{kAgent, "trace"};
  char name[16];
  for (int i = 0; i < 1280; i++) {
    snprintf(name, sizeof name, "mcp:p_%03x", i);
    argv.insert(argv.end(), {"--usdt", many + ":" + name});
  }
  argv.insert(argv.end(), {"-o", events_file, "--", many, "2"});
  const auto again = std::chrono::steady_clock::now();
  r = run_command(argv);
  const double probes_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  const auto summary = parse_summary(r.err);
  ASSERT_EQ(summary.size(), 1280u) << r.err.substr(0, 2000);
  for (int i = 0; i < 1280; i++) {
    snprintf(name, sizeof name, "mcp:p_%03x", i);
    const std::string probe = "usdt:" + file + ":" + name;
    ASSERT_TRUE(summary.count(probe)) << probe;
    EXPECT_EQ(summary.at(probe).seen, 2u) << probe;
    EXPECT_EQ(summary.at(probe).delivered, 2u) << probe;
  }
  EXPECT_LT(probes_s, 60) << "1,280 probes took " << probes_s << " s to attach, run and detach";
}

TEST(TraceUsdt, ASemaphoreGuardedProbeRunsOnlyWhileTraced) {
  MCP_REQUIRE_BPF();
  auto alone = run_command({kWorkload, "usdt", "300"});
  ASSERT_EQ(alone.exit_code, 0);
  EXPECT_EQ(alone.out, "guarded 0\n");  // nobody traces it: the semaphore is zero
  TempDir dir("mcp-usdt");
  const std::string events_file = (dir.path() / "events").string();
  auto r = run_command({kAgent, "trace", "--usdt", kWorkload + ":mcp:guarded", "-o", events_file, "--", kWorkload,
                        "usdt", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "guarded 300\n");  // libbpf raised the semaphore before the command ran
  EXPECT_EQ(read_events(events_file).size(), 300u);
  EXPECT_EQ(parse_summary(r.err)[usdt_probe("guarded")].seen, 300u);
}

TEST(TraceUsdt, RateHundredthKeepsWithinFiveSigmaAndWeightsRestoreTheCount) {
  MCP_REQUIRE_BPF();
  constexpr double kHits = 200000, kRate = 0.01;
  TempDir dir("mcp-usdt");
  const std::string events_file = (dir.path() / "events").string();
  auto r = run_command({kAgent, "trace", "--usdt", kWorkload + ":mcp:tick", "--sample-rate", "0.01", "--no-windows",
                        "-o", events_file, "--", kWorkload, "usdt", "200000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[usdt_probe("tick")];
  EXPECT_EQ(row.seen, 200000u);
  const double sigma = std::sqrt(kHits * kRate * (1 - kRate));
  EXPECT_NEAR(static_cast<double>(row.kept), kHits * kRate, 5 * sigma);
  const auto events = read_events(events_file);
  EXPECT_EQ(events.size(), row.kept);
  double estimate = 0;
  for (const auto& e : events) estimate += e["weight"].get<double>();
  EXPECT_NEAR(estimate, kHits, 5 * sigma / kRate);
  EXPECT_NEAR(row.estimated, kHits, 5 * sigma / kRate);
}

// The trace id is the hit's fourth argument (N:u64, a splitmix64 sequence): two runs keep the
// same hits, about a tenth of them, each with the id it was decided on.
TEST(TraceUsdt, ATraceIdArgumentDecidesTheSameHitsInEveryRun) {
  MCP_REQUIRE_BPF();
  std::vector<std::set<int64_t>> kept;
  for (int run = 0; run < 2; run++) {
    TempDir dir("mcp-usdt");
    const std::string events_file = (dir.path() / "events").string();
    auto r = run_command({kAgent, "trace", "--usdt", kWorkload + ":mcp:tick", "--trace-id-arg", "3:u64",
                          "--sample-rate", "0.1", "-o", events_file, "--", kWorkload, "usdt", "5000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<int64_t> ids;
    for (const auto& e : read_events(events_file)) {
      ids.insert(e["args"][0].get<int64_t>());
      char hex[33];
      snprintf(hex, sizeof(hex), "%016llx%016llx", 0ull, e["args"][3].get<unsigned long long>());
      EXPECT_EQ(e["trace_id"], hex) << e;
    }
    kept.push_back(ids);
  }
  EXPECT_GT(kept[0].size(), 300u);
  EXPECT_LT(kept[0].size(), 700u);
  EXPECT_EQ(kept[0], kept[1]);
}

TEST(TraceUsdt, ListUsdtPrintsEachProbeWithItsArgumentsAndSemaphore) {
  auto r = run_command({kAgent, "trace", "--list-usdt", kWorkload});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(usdt_probe("tick") + "\t4 args: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(usdt_probe("guarded") + "\t1 args: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\t1 site\tsemaphore\n"), std::string::npos) << r.out;
  auto none = run_command({kAgent, "trace", "--list-usdt", "/bin/true"});
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_TRUE(none.out.empty());
  EXPECT_NE(none.err.find("has no USDT probes"), std::string::npos) << none.err;
}

TEST(TraceUsdt, BadSpecsAreOneLineWithTheRightExitCode) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--usdt", kWorkload + ":mcp:nope"}, 1, "USDT probe mcp:nope not found in " + real_path(kWorkload)},
      {{"--usdt", "mcp:tick"}, 2, "USDT probe must be BINARY:PROVIDER:NAME"},
      {{"--usdt", kWorkload + ":mcp:tick", "--string-arg", "6"}, 2, "--string-arg 6: argument index must be 0..5"},
      {{"--syscall", "getppid", "--string-arg", "1"}, 2, "--string-arg applies to --usdt probes"},
      {{"--usdt", kWorkload + ":mcp:tick", "--usdt", kWorkload + ":mcp:tick"}, 2, "is given twice"},
  };
  const bool bpf = mcp::test::bpf_unavailable_reason().empty();
  for (const auto& c : cases) {
    if (c.code == 1 && !bpf) continue;
    std::vector<std::string> argv = {kAgent, "trace"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--", "true"});
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, c.code) << c.needle << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Debian's python3.11 is built with its USDT probes. python:line(file, function, line) fires
// once per executed line: the loop body below runs exactly kIterations times.
class PythonLine : public ::testing::Test {
 protected:
  static constexpr int kIterations = 20000;
  static constexpr int kBodyLine = 5;
  void SetUp() override {
    MCP_REQUIRE_BPF();
    if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is not installed";
    bool has_line = false;
    for (const auto& p : mcp::loader::read_usdt_probes(kPython)) has_line |= p.provider == "python" && p.name == "line";
    if (!has_line) GTEST_SKIP() << kPython << " has no python:line USDT probe";
    script_ = (dir_.path() / "work.py").string();
    std::ofstream(script_) << "import sys\n"
                              "def work(n):\n"
                              "    total = 0\n"
                              "    for i in range(n):\n"
                              "        total += i\n"
                              "    return total\n"
                              "print(work(int(sys.argv[1])))\n";
  }
  // Events of the script's body line, by (function, line), from a trace at `rate`.
  std::map<std::pair<std::string, int>, double> trace(const std::string& rate, uint64_t* seen) {
    const std::string events_file = (dir_.path() / ("events-" + rate)).string();
    auto r = run_command({kAgent, "trace", "--usdt", kPython + ":python:line", "--string-arg", "0", "--string-arg",
                          "1", "--sample-rate", rate, "--no-windows", "-o", events_file, "--", kPython, script_,
                          std::to_string(kIterations)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, std::to_string(int64_t{kIterations} * (kIterations - 1) / 2) + "\n");
    *seen = parse_summary(r.err)["usdt:" + real_path(kPython) + ":python:line"].seen;
    std::map<std::pair<std::string, int>, double> out;
    for (const auto& e : read_events(events_file)) {
      const auto& a = e["attributes"];
      if (!a.contains("arg0") || a["arg0"] != script_) continue;
      out[{a.value("arg1", ""), e["args"][2].get<int>()}] += e["weight"].get<double>();
    }
    return out;
  }
  TempDir dir_{"mcp-python"};
  std::string script_;
};

TEST_F(PythonLine, RateOneCountsEachExecutedLineOfTheScriptExactly) {
  uint64_t seen = 0;
  const auto lines = trace("1", &seen);
  EXPECT_EQ(lines.at({"work", kBodyLine}), kIterations);
  EXPECT_EQ(lines.at({"work", 3}), 1);  // total = 0
  EXPECT_EQ(lines.at({"work", 6}), 1);  // return total
  EXPECT_GE(seen, 2u * kIterations);    // the interpreter's own lines besides
  // bpftrace on the same probe and script counts the same lines the same number of times.
  if (!std::filesystem::exists("/usr/bin/bpftrace")) GTEST_SKIP() << "bpftrace is not installed: no comparison";
  auto bt = run_command({"/usr/bin/bpftrace", "-e",
                         "usdt:" + kPython + ":python:line /str(arg0) == \"" + script_ +
                             "\"/ { @[str(arg1), arg2] = count(); }",
                         "-c", kPython + " " + script_ + " " + std::to_string(kIterations)});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  std::map<std::pair<std::string, int>, double> theirs;
  static const std::regex row(R"(^@\[(.*), (\d+)\]: (\d+)$)");
  std::istringstream in(bt.out);
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, row)) theirs[{m[1], std::stoi(m[2])}] = std::stod(m[3]);
  EXPECT_EQ(lines, theirs);
}

TEST_F(PythonLine, RateHundredthEstimatesTheBodyLinesCountHonestly) {
  uint64_t seen = 0;
  const auto lines = trace("0.01", &seen);
  const double sigma = std::sqrt(kIterations * 0.01 * 0.99) / 0.01;
  ASSERT_TRUE(lines.count({"work", kBodyLine}));
  EXPECT_NEAR(lines.at({"work", kBodyLine}), kIterations, 5 * sigma);
}

}  // namespace
