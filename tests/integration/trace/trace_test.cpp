// Runtime tier: the real mcp-agent binary loads real BPF and traces the real
// workload binary; assertions are on what it prints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "../../support/files.h"
#include "../../support/process.h"
#include "../../support/run_command.h"
#include "../../support/wait_until.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::parse_summary;
using mcp::test::run_command;
using mcp::test::TempDir;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";
const std::string kManyFunctions = std::string(MCP_TEST_DIR) + "/mcp-many-functions";

std::string probe(const std::string& fn) {
  char buf[4096];
  return std::string(realpath(kWorkload.c_str(), buf)) + ":" + fn;
}

TEST(TraceUprobe, RateOneDeliversEveryCallWithItsArguments) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 2000;
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--", kWorkload, "calls",
                        std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), static_cast<size_t>(kCalls));
  for (int i = 0; i < kCalls; i++) {
    const auto& e = events[i];
    EXPECT_EQ(e["kind"], "uprobe");
    EXPECT_EQ(e["probe"], probe("mcp_work"));
    EXPECT_EQ(e["comm"], "mcp-workload");
    EXPECT_EQ(e["args"], nlohmann::json({i, 2, 3, 4, 5, 6}));
    EXPECT_EQ(e["weight"], 1.0);
    EXPECT_EQ(e["pid"], events[0]["pid"]);
    EXPECT_GT(e["ts_ns"].get<uint64_t>(), 1600000000ull * 1000000000ull);
  }
  auto summary = parse_summary(r.err);
  ASSERT_TRUE(summary.count(probe("mcp_work"))) << r.err;
  const auto& row = summary[probe("mcp_work")];
  EXPECT_EQ(row.seen, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(row.kept, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(row.lost, 0u);
}

// Issue 36: --uprobe BINARY:PATTERN attaches one probe per matching function (bpftrace's
// wildcards), each with its own counters; a pattern that matches more functions than an
// agent holds probes is one usage line.
TEST(TraceUprobe, AWildcardAttachesEachMatchingFunctionWithItsOwnCounts) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_[wr]*", "--uprobe", kWorkload + ":mcp_work",
                        "--", kWorkload, "recurse", "3", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = parse_summary(r.err);
  ASSERT_TRUE(summary.count(probe("mcp_work"))) << r.err;
  ASSERT_TRUE(summary.count(probe("mcp_recurse"))) << r.err;
  EXPECT_EQ(summary.at(probe("mcp_recurse")).seen, 12u);
  EXPECT_EQ(summary.at(probe("mcp_work")).seen, 0u);
  EXPECT_EQ(summary.size(), 2u) << "mcp_work once, though two flags name it: " << r.err;
  EXPECT_EQ(parse_json_lines(r.out).size(), 12u);

  auto none = run_command({kAgent, "trace", "--uprobe", kWorkload + ":zz_no_such_*", "--", "true"});
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_NE(none.err.find("no function of "), std::string::npos) << none.err;
}

// Issue 36: --args N declares the traced function's argument count: JSON carries N values and
// the table shows them; undeclared, JSON carries all six registers and the table none.
TEST(TraceUprobe, ArgsDeclaresHowManyArgumentsEventsCarryAndTheTableShows) {
  MCP_REQUIRE_BPF();
  auto json = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--args", "2", "--", kWorkload,
                           "calls", "3"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto events = parse_json_lines(json.out);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2]["args"], nlohmann::json({2, 2}));
  for (const auto& [args, shown] : {std::pair{std::string("2"), std::string(" 0x2 0x2\n")},
                                    std::pair{std::string(), std::string(" -  \n")}}) {
    std::vector<std::string> argv = {kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--format", "table"};
    if (!args.empty()) argv.insert(argv.end(), {"--args", args});
    argv.insert(argv.end(), {"--", kWorkload, "calls", "3"});
    auto table = run_command(argv);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_NE(table.out.find(shown), std::string::npos) << "--args '" << args << "':\n" << table.out;
  }
  auto bad = run_command({kAgent, "trace", "--syscall", "getppid", "--args", "2", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--args applies to --uprobe probes"), std::string::npos) << bad.err;
}

// Issue 36: an agent holds 4,096 probes, each with its own counters. A wildcard's matches
// attach through one uprobe_multi link where the kernel has them (one descriptor, not 4,096),
// and one by one where not (MCP_KERNEL_FEATURES_OFF=uprobe_multi stands for such a kernel). Function i is
// called (i % 3) + 1 times a round, so a count landing on another probe's id shows.
void expect_many_function_counts(const mcp::test::CommandResult& r, size_t functions, uint64_t rounds) {
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  const auto summary = parse_summary(r.err);
  ASSERT_EQ(summary.size(), functions) << r.err.substr(0, 2000);
  std::map<std::string, uint64_t> delivered;
  for (const auto& e : parse_json_lines(r.out)) delivered[e["probe"].get<std::string>()]++;
  char buf[4096];
  const std::string file = realpath(kManyFunctions.c_str(), buf);
  for (size_t i = 0; i < functions; i++) {
    char name[32];
    snprintf(name, sizeof name, "mcp_many_%03zx", i);
    const std::string probe = file + ":" + name;
    const uint64_t calls = rounds * (i % 3 + 1);
    ASSERT_TRUE(summary.count(probe)) << probe;
    EXPECT_EQ(summary.at(probe).seen, calls) << probe;
    EXPECT_EQ(summary.at(probe).kept, calls) << probe;
    EXPECT_EQ(delivered[probe], calls) << probe;
  }
}

TEST(TraceUprobe, FourThousandNinetySixProbesEachCountTheirOwnCalls) {
  MCP_REQUIRE_BPF();
  // The agent's descriptors once every probe is attached (the command starts after that).
  auto r = run_command({kAgent, "trace", "--uprobe", kManyFunctions + ":mcp_many_*", "--", "/bin/sh", "-c",
                        "echo fds=$(ls /proc/$PPID/fd | wc -l) >&2; exec \"$0\" 2", kManyFunctions});
  expect_many_function_counts(r, 4096, 2);
  // One link for the 4,096, not a descriptor each.
  const auto at = r.err.find("fds=");
  ASSERT_NE(at, std::string::npos) << r.err.substr(0, 2000);
  EXPECT_LT(std::stoul(r.err.substr(at + 4)), 200u);

  auto over = run_command({kAgent, "trace", "--uprobe", kManyFunctions + ":main", "--uprobe",
                           kManyFunctions + ":mcp_many_*", "--", "true"});
  EXPECT_EQ(over.exit_code, 2) << over.err;
  EXPECT_NE(over.err.find("matches 4096 functions of"), std::string::npos) << over.err;
  EXPECT_NE(over.err.find("an agent holds at most 4096 probes"), std::string::npos) << over.err;
}

TEST(TraceUprobe, WithoutUprobeMultiLinksAWildcardAttachesEachMatchAlone) {
  MCP_REQUIRE_BPF();
  auto r = run_command({"env", "MCP_KERNEL_FEATURES_OFF=uprobe_multi", kAgent, "trace", "--uprobe",
                        kManyFunctions + ":mcp_many_0*", "--", "/bin/sh", "-c",
                        "echo fds=$(ls /proc/$PPID/fd | wc -l) >&2; exec \"$0\" 3", kManyFunctions});
  expect_many_function_counts(r, 256, 3);
  // a perf-event uprobe (a descriptor) each
  const auto at = r.err.find("fds=");
  ASSERT_NE(at, std::string::npos) << r.err.substr(0, 2000);
  EXPECT_GT(std::stoul(r.err.substr(at + 4)), 256u);
}

// A wildcard match the kernel refuses (a lock-prefixed first instruction, as libc's
// pthread_spin_lock) is skipped with a line naming it and why; the other matches are traced
// exactly. The group link refuses the lot, so they attach one by one. The kernel checks the
// instruction where a process maps the file: a holder maps it while the probes attach.
TEST(TraceUprobe, AWildcardMatchTheKernelRefusesIsSkippedWithALine) {
  MCP_REQUIRE_BPF();
#ifndef __x86_64__
  GTEST_SKIP() << "the refused function is x86-64 assembly";
#endif
  TempDir dir;
  mcp::test::Process holder({kManyFunctions, "0", "hold"}, dir.path(), "holder");
  ASSERT_TRUE(holder.wait_for_err(std::regex("0 rounds"), std::chrono::seconds(10))) << holder.err();
  auto r = run_command({kAgent, "trace", "--uprobe", kManyFunctions + ":mcp_*_00[0-3]", "--", kManyFunctions, "2"});
  expect_many_function_counts(r, 4, 2);
  EXPECT_NE(r.err.find(":mcp_locked_000 failed: cannot attach"), std::string::npos) << r.err;
  // Named by itself, the same function is an error that ends the trace.
  auto named = run_command({kAgent, "trace", "--uprobe", kManyFunctions + ":mcp_locked_000", "--", "true"});
  EXPECT_EQ(named.exit_code, 1) << named.err;
  EXPECT_NE(named.err.find("cannot attach"), std::string::npos) << named.err;
}

TEST(TraceUprobe, RateTenthKeepsWithinFiveSigmaAndWeightsRestoreTheCount) {
  MCP_REQUIRE_BPF();
  constexpr double kCalls = 100000, kRate = 0.1;
  // --no-windows: independent draws call by call (sampling windows: windows_test.cpp).
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--sample-rate", "0.1", "--no-windows",
                        "--", kWorkload, "calls", "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 100000u);
  const double sigma = std::sqrt(kCalls * kRate * (1 - kRate));
  EXPECT_NEAR(static_cast<double>(row.kept), kCalls * kRate, 5 * sigma);
  const auto events = parse_json_lines(r.out);
  EXPECT_EQ(events.size(), row.kept);
  EXPECT_EQ(row.delivered, row.kept);
  ASSERT_FALSE(events.empty());
  EXPECT_NEAR(events[0]["weight"].get<double>(), 10.0, 1e-6);
  EXPECT_NEAR(row.estimated, kCalls, 5 * sigma * 10);
}

TEST(TraceUprobe, LatencyEventsCarryReturnValueAndAtLeastTheSleep) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_sleep", "--latency", "--", kWorkload, "sleep",
                        "5", "3000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 5u);
  for (const auto& e : events) {
    EXPECT_EQ(e["kind"], "uretprobe");
    EXPECT_EQ(e["ret"], 42);
    EXPECT_EQ(e["args"][0], 3000);
    EXPECT_GE(e["duration_ns"].get<uint64_t>(), 3000000u);
    EXPECT_LT(e["duration_ns"].get<uint64_t>(), 3000000000u);
  }
}

TEST(TraceSyscall, SeesTheWorkloadsCallsWithItsPidAndReturnValue) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--", kWorkload, "getppid", "500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 500u);
  const int pid = events[0]["pid"];
  for (const auto& e : events) {
    EXPECT_EQ(e["kind"], "syscall");
    EXPECT_EQ(e["probe"], "syscall:getppid");
    EXPECT_EQ(e["pid"], pid);
    EXPECT_EQ(e["comm"], "mcp-workload");
    EXPECT_EQ(e["args"].size(), 0u);  // getppid takes no arguments
    EXPECT_GT(e["ret"].get<int>(), 0);  // the agent's pid: a real parent
    EXPECT_FALSE(e.contains("duration_ns"));  // one program, at exit: timing needs --latency
  }
  EXPECT_EQ(parse_summary(r.err)["syscall:getppid"].seen, 500u);
}

TEST(TraceSyscall, PidFilterIgnoresOtherProcesses) {
  MCP_REQUIRE_BPF();
  // A second workload runs beside the traced one and must not appear.
  const pid_t other = fork();
  if (other == 0) {
    execl(kWorkload.c_str(), kWorkload.c_str(), "getppid", "1000000000", nullptr);
    _exit(127);
  }
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--", kWorkload, "getppid", "300"});
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 300u);
  for (const auto& e : events) EXPECT_NE(e["pid"].get<int>(), other);
}

TEST(TraceRingBuffer, TinyBufferCountsLostEventsAndReportsThem) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--ringbuf-size", "4K", "--output",
                        "/dev/null", "--", kWorkload, "calls", "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 100000u);
  EXPECT_GT(row.lost, 0u);
  EXPECT_EQ(row.delivered + row.lost, row.kept);  // nothing vanishes uncounted
  EXPECT_NE(r.err.find("lost"), std::string::npos);
}

// The exporter step of `run` (compliance rules, error_only, exporter sampling) in `trace`:
// a rules file drops the first ten calls and redacts the second argument of the rest.
TEST(TraceExport, RulesFileDropsAndRedactsBeforePrinting) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string rules = dir.write("rules", "rule \"warm-up\" when args[0] < 10 then drop = true end\n"
                                               "rule \"pii\" when kind == \"uprobe\" then redact = [\"args[1]\"] end\n");
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--rules", rules, "--", kWorkload,
                        "calls", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 90u) << r.err;
  for (size_t i = 0; i < events.size(); i++) EXPECT_EQ(events[i]["args"], nlohmann::json({i + 10, 0, 3, 4, 5, 6}));
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 100u);
  EXPECT_EQ(row.delivered, 90u);
}

// Issue 31: every redaction the rules make is in the audit trail before the event is printed,
// and `audit verify --key` proves the trail whole, then names the record whose byte was changed.
TEST(TraceExport, AuditLogRecordsEachRedactionAndVerifyCatchesAChangedByte) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string rules = dir.write("rules", "rule \"pii\" when args[0] >= 90 then redact = [\"args[1]\"] "
                                               "audit.trace = [\"GDPR-9\"] end\n");
  const std::string trail = dir / "trail";
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--rules", rules, "--audit-log", trail,
                        "--", kWorkload, "calls", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("audit: 10 records in " + trail), std::string::npos) << r.err;
  const std::string key = trail + ".key";  // beside the trail, not in it
  auto v = run_command({kAgent, "audit", "verify", "--key", key, trail});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("ok: 10 records in 1 file(s), seq 1..10, chain unbroken and sealed"), std::string::npos) << v.out;
  const std::string file = trail + "/audit-000000000001.jsonl";
  std::string text = mcp::test::slurp(file);
  const size_t third = text.find("\"seq\":3,");
  ASSERT_NE(third, std::string::npos) << text;
  text[text.find("GDPR-9", third) + 5] = '8';  // the clause of record 3, one byte
  mcp::test::write_file(file, text);
  v = run_command({kAgent, "audit", "verify", "--key", key, file});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE(v.err.find(file + ":3: its MAC does not match its content"), std::string::npos) << v.err;
  // --audit-log without rules would record nothing: refused.
  r = run_command({kAgent, "trace", "--syscall", "getppid", "--audit-log", trail});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(TraceExport, ErrorOnlyKeepsOnlyFailedCalls) {
  MCP_REQUIRE_BPF();
  // getppid never fails: with --error-only nothing is exported.
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--latency", "--error-only", "--", kWorkload,
                        "getppid", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(parse_json_lines(r.out).empty()) << r.out;
  EXPECT_EQ(parse_summary(r.err)["syscall:getppid"].delivered, 0u) << r.err;
}

TEST(TraceExport, BadRulesFileIsOneUsageLineWithFileLineColumn) {
  const TempDir dir;
  const std::string rules = dir.write("rules", "rule \"ok\" when pid == 1 then drop = true end\nrule \"bad\" when then end\n");
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--rules", rules});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mcp-agent: " + rules + ":2:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// --config FILE: agent.yaml's probes and exporter sections in `trace`, read by the code
// `run` uses; flags add to them.
class TraceConfig : public ::testing::Test {
 protected:
  std::string write(const std::string& yaml) { return dir_.write("agent.yaml", "version: 1\n" + yaml); }
  TempDir dir_;
};

TEST_F(TraceConfig, YamlProbeAndExporterSampleRateKeepOnlyWhatTheFilterLetsThrough) {
  MCP_REQUIRE_BPF();
  constexpr double kCalls = 4000, kRate = 0.25;
  const auto config = write("probes:\n  - binary: " + probe("mcp_work").substr(0, probe("mcp_work").rfind(':')) +
                            "\n    symbol: mcp_work\n    service: from-yaml\n    tags: {team: a}\n"
                            "exporter:\n  sample_rate: 0.25\n");
  auto r = run_command({kAgent, "trace", "--config", config, "--", kWorkload, "calls", "4000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 4000u) << r.err;
  EXPECT_EQ(row.kept, 4000u);  // the kernel keeps everything; the exporter step samples
  const auto events = parse_json_lines(r.out);
  EXPECT_EQ(events.size(), row.delivered);
  const double sigma = std::sqrt(kCalls * kRate * (1 - kRate));
  EXPECT_NEAR(static_cast<double>(events.size()), kCalls * kRate, 5 * sigma);
  for (const auto& e : events) {
    EXPECT_EQ(e["probe"], probe("mcp_work"));
    EXPECT_EQ(e["service"], "from-yaml");  // the YAML probe's labels
    EXPECT_EQ(e["tags"]["team"], "a");
    EXPECT_NEAR(e["weight"].get<double>(), 4.0, 1e-6);  // weights stay exact
  }
}

TEST_F(TraceConfig, ComplianceRulesFromTheFileApplyToFlagProbesToo) {
  MCP_REQUIRE_BPF();
  const auto config = write("compliance:\n  rules: |\n"
                            "    rule \"warm-up\" when args[0] < 10 then drop = true end\n"
                            "    rule \"pii\" when kind == \"uprobe\" then redact = [\"args[1]\"] end\n");
  auto r = run_command({kAgent, "trace", "--config", config, "--uprobe", kWorkload + ":mcp_work", "--", kWorkload,
                        "calls", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 90u) << r.err;
  for (size_t i = 0; i < events.size(); i++) EXPECT_EQ(events[i]["args"], nlohmann::json({i + 10, 0, 3, 4, 5, 6}));
  EXPECT_EQ(parse_summary(r.err)[probe("mcp_work")].delivered, 90u);
}

// Flags add probes beside the file's, and each probe keeps its own sampling and labels:
// the YAML uprobe at its rate 0.5 labelled "yaml", the --syscall at -r 1 labelled "cli".
TEST_F(TraceConfig, FlagProbesAddToTheFilesAndEachKeepsItsOwnSettings) {
  MCP_REQUIRE_BPF();
  const std::string binary = probe("mcp_work").substr(0, probe("mcp_work").rfind(':'));
  const auto config = write("probes:\n  - binary: " + binary +
                            "\n    symbol: mcp_work\n    service: yaml\n    sampling: {rate: 0.5}\n");
  auto r = run_command({kAgent, "trace", "--config", config, "--syscall", "getppid", "--service", "cli", "--",
                        "/bin/sh", "-c", kWorkload + " calls 2000 && " + kWorkload + " getppid 300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t uprobes = 0, syscalls = 0;
  for (const auto& e : parse_json_lines(r.out)) {
    if (e["comm"] != "mcp-workload") continue;
    if (e["kind"] == "uprobe") {
      uprobes++;
      EXPECT_EQ(e["service"], "yaml");
      EXPECT_NEAR(e["weight"].get<double>(), 2.0, 1e-6);
    } else {
      syscalls++;
      EXPECT_EQ(e["probe"], "syscall:getppid");
      EXPECT_EQ(e["service"], "cli");
      EXPECT_EQ(e["weight"], 1.0);
    }
  }
  EXPECT_EQ(syscalls, 300u) << r.err;
  const double sigma = std::sqrt(2000 * 0.5 * 0.5);
  EXPECT_NEAR(static_cast<double>(uprobes), 1000.0, 5 * sigma) << r.err;
  EXPECT_EQ(parse_summary(r.err)[probe("mcp_work")].seen, 2000u) << r.err;
}

TEST_F(TraceConfig, BadFileIsOneUsageLineWithFileLineColumn) {
  const auto config = write("syscalls: [getppid]\nexporter:\n  error_olny: true\n");
  auto r = run_command({kAgent, "trace", "--config", config});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mcp-agent: " + config + ":4:3: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST_F(TraceConfig, AFlagThatContradictsTheFileIsOneUsageLine) {
  const auto config = write("syscalls: [getppid]\n");
  auto r = run_command({kAgent, "trace", "--config", config, "--syscall", "getppid"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "mcp-agent: --syscall getppid: " + config + ":2:12 traces it already\n");
}

TEST_F(TraceConfig, AFlagUprobeTheFileDeclaresIsOneUsageLine) {
  const std::string binary = probe("mcp_work").substr(0, probe("mcp_work").rfind(':'));
  const auto config = write("probes:\n  - binary: " + binary + "\n    symbol: mcp_work\n");
  auto r = run_command({kAgent, "trace", "--config", config, "--uprobe", probe("mcp_work"), "--", kWorkload});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "mcp-agent: --uprobe " + probe("mcp_work") + ": " + config + ":3:5 traces it already\n");
  MCP_REQUIRE_BPF();
  // Another function of the same binary is no repetition.
  r = run_command({kAgent, "trace", "--config", config, "--uprobe", binary + ":mcp_sleep", "--", kWorkload, "calls", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_summary(r.err)[probe("mcp_work")].seen, 5u) << r.err;
}

// Readiness: the line on stderr and the --ready-file, both written once probes are attached;
// a test (or a supervisor) waits on them instead of sleeping.
TEST(TraceReadiness, ReadyLineAndFileAppearOnceAttachedAndCallsAfterThemAreSeen) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string ready = dir / "ready";
  mcp::test::Process agent({kAgent, "trace", "--syscall", "getppid", "--pid", std::to_string(getpid()),
                            "--ready-file", ready, "--no-summary"},
                           dir.path(), "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("mcp-agent: ready: 1 probes attached\n"), std::chrono::seconds(20)))
      << agent.err();
  EXPECT_EQ(mcp::test::slurp(ready), "mcp-agent: ready: 1 probes attached\n");
  for (int i = 0; i < 5; i++) getppid();
  // Our five calls (and nothing else of ours) arrive without any sleep before them.
  mcp::test::wait_until([&] { return parse_json_lines(agent.out()).size() >= 5; });
  agent.signal(SIGINT);
  EXPECT_EQ(agent.wait(std::chrono::seconds(20)), 0) << agent.err();
  EXPECT_EQ(parse_json_lines(agent.out()).size(), 5u) << agent.out();
}

// Issue 29: a binary replaced while `trace` ran was not followed (its flag probes were attached
// by hand, not as `run` attaches them): the processes started from the new file were missed
// without a word. Now the new file is attached too, and every call of both is seen once.
TEST(TraceUprobe, ABinaryReplacedWhileTracingIsFollowed) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string app = dir / "app", go = dir / "go";
  std::filesystem::copy_file(kWorkload, app);
  const std::string script = app + " calls 10 >/dev/null; while [ ! -e " + go + " ]; do sleep 0.05; done; " + app +
                             " calls 10 >/dev/null";
  mcp::test::Process agent({kAgent, "trace", "--verbose", "--no-summary", "--uprobe", app + ":mcp_work", "--", "sh",
                            "-c", script},
                           dir.path(), "agent");
  ASSERT_TRUE(mcp::test::wait_until([&] { return parse_json_lines(agent.out()).size() >= 10; },
                                    std::chrono::seconds(20)))
      << agent.err();
  std::filesystem::copy_file(kWorkload, dir / "app.new");
  std::filesystem::rename(dir / "app.new", app);
  ASSERT_TRUE(agent.wait_for_err(std::regex("was replaced; attached to the new file too"), std::chrono::seconds(20)))
      << agent.err();
  std::ofstream(go.c_str()) << "";
  EXPECT_EQ(agent.wait(std::chrono::seconds(20)), 0) << agent.err();
  size_t calls = 0;
  for (const auto& e : parse_json_lines(agent.out())) calls += e["kind"] == "uprobe";
  EXPECT_EQ(calls, 20u) << agent.err();
}

// Issue 29: two runs sharing one --spool-dir once both ran (one aborted, the other reported
// batches acked that never arrived). The second is refused at start with one line naming the
// holder; the first goes on.
TEST(TraceSpool, ASecondRunOnTheSameSpoolDirIsRefusedWithOneLine) {
  MCP_REQUIRE_BPF();
  const TempDir dir;
  const std::string spool = dir / "spool", ready = dir / "ready";
  // No broker listens: batches wait in the spool.
  mcp::test::Process first({kAgent, "trace", "--syscall", "getppid", "--pid", std::to_string(getpid()), "--broker",
                            "127.0.0.1:1", "--spool-dir", spool, "--ready-file", ready, "--no-summary"},
                           dir.path(), "first");
  ASSERT_TRUE(first.wait_for_err(std::regex("ready: "), std::chrono::seconds(20))) << first.err();
  auto second = run_command({kAgent, "trace", "--syscall", "getppid", "--broker", "127.0.0.1:1", "--spool-dir",
                             spool, "--", "true"});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find(spool + " is in use by another process"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find(std::to_string(first.pid())), std::string::npos) << "names the holder: " << second.err;
  EXPECT_EQ(std::count(second.err.begin(), second.err.end(), '\n'), 1) << second.err;
  EXPECT_TRUE(second.out.empty());
  // The first run was not disturbed: what it kept is in its spool, not lost.
  for (int i = 0; i < 3; i++) getppid();
  first.signal(SIGINT);
  ASSERT_TRUE(first.wait_for_err(std::regex("waiting up to"), std::chrono::seconds(20))) << first.err();
  first.signal(SIGINT);
  EXPECT_EQ(first.wait(std::chrono::seconds(30)), 1) << first.err();
  EXPECT_NE(first.err().find("kept in the spool " + spool), std::string::npos) << first.err();
}

TEST(TraceErrors, EachFailureIsOneLineWithTheRightExitCode) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"trace", "--uprobe", kWorkload + ":no_such_fn", "--", "true"}, 1, "symbol no_such_fn not found in"},
      {{"trace", "--uprobe", "/no/such/bin:fn", "--", "true"}, 1, "binary not found: /no/such/bin"},
      {{"trace", "--syscall", "getppid", "--sample-rate", "0"}, 2, "--sample-rate must be in [1e-6, 1], got 0"},
      {{"trace", "--syscall", "getppid", "--duration", "ten"}, 2, "bad duration"},
      {{"trace", "--no-such-flag"}, 2, "no-such-flag"},
      {{"trace"}, 2, "nothing to trace"},
      {{"trace", "--syscall", "not_a_syscall", "--", "true"}, 1, "unknown syscall"},
      {{"trace", "--syscall", "getppid", "--", "/no/such/command"}, 1, "cannot run /no/such/command"},
      {{"trace", "--syscall", "getppid", "--syscall", "getppid", "--", "true"}, 2, "--syscall getppid is given twice"},
  };
  const bool bpf = mcp::test::bpf_unavailable_reason().empty();
  for (const auto& c : cases) {
    if (c.code == 1 && !bpf) continue;  // runtime failures need the BPF environment to get that far
    std::vector<std::string> argv = {kAgent};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, c.code) << c.needle << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

// Item 6 of issue 14: a process in its own mount namespace sees another file at the path the
// agent is given (a bind mount over it). The agent must probe the file the process sees, through
// /proc/PID/root, and say so when the process maps no file with the probed inode.
class MountNamespaceTarget : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    namespace fs = std::filesystem;
    dir_ = dir_holder_.path();
    // Two copies: same symbols, different inodes. The agent's /dir/app is one, the process's
    // /dir/app is the other, bind-mounted over it inside its private mount namespace.
    fs::copy_file(kWorkload, dir_ / "app");
    fs::copy_file(kWorkload, dir_ / "inner");
    target_ = std::make_unique<mcp::test::Process>(
        std::vector<std::string>{"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                                 "mount --bind " + (dir_ / "inner").string() + " " + (dir_ / "app").string() +
                                     " && exec " + (dir_ / "app").string() + " rate 2000 60"},
        dir_, "target");
    const std::string comm_file = "/proc/" + std::to_string(target_->pid()) + "/comm";
    mcp::test::wait_until([&] { return mcp::test::slurp(comm_file) == "app\n"; });
    ASSERT_EQ(mcp::test::slurp(comm_file), "app\n") << "target did not start: " << target_->err();
  }
  void TearDown() override { target_.reset(); }
  TempDir dir_holder_{"mcp-mntns"};
  std::filesystem::path dir_;
  std::unique_ptr<mcp::test::Process> target_;
};

TEST_F(MountNamespaceTarget, PathIsResolvedInTheTargetsMountNamespace) {
  const std::string pid = std::to_string(target_->pid());
  auto r = run_command({kAgent, "trace", "--pid", pid, "-u", (dir_ / "app").string() + ":mcp_work", "-d", "1s"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  EXPECT_GT(events.size(), 100u) << "the probe must sit on the file the process runs\n" << r.err;
  if (!events.empty()) EXPECT_EQ(events[0]["probe"], (dir_ / "app").string() + ":mcp_work") << "the path as given";
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

TEST_F(MountNamespaceTarget, AbsoluteSymlinksResolveInTheTargetsRootNotTheAgents) {
  // Through /proc/PID/root the kernel would resolve an absolute link target against the
  // agent's root, and land on the agent's /dir/app again.
  std::filesystem::create_symlink(dir_ / "app", dir_ / "link");
  const std::string pid = std::to_string(target_->pid());
  auto r = run_command({kAgent, "trace", "--pid", pid, "-u", (dir_ / "link").string() + ":mcp_work", "-d", "1s"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(parse_json_lines(r.out).size(), 100u) << r.err;
}

TEST_F(MountNamespaceTarget, WarnsWhenTheProcessMapsNoFileWithTheProbedInode) {
  const std::string pid = std::to_string(target_->pid());
  auto r = run_command({kAgent, "trace", "--pid", pid, "-u", kWorkload + ":mcp_work", "-d", "200ms"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("mcp-agent: warning: pid " + pid + " maps no file with the device and inode of"),
            std::string::npos)
      << r.err;
}

}  // namespace
