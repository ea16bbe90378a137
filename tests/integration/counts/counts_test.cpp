// Runtime tier for issue 17, "counts you can trust": latency pairing under recursion
// and longjmp, summary accounting under ring loss, descendants followed like strace -f,
// --pid exiting with its tree, OpenTelemetry-exact trace-id decisions. Real agent, real
// BPF, the real workload binary; assertions on what the agent prints.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "../../support/bpf_stats.h"
#include "../../support/run_command.h"
#include "../../support/trace_ids.h"
#include "common/event.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::parse_summary;
using mcp::test::run_command;
namespace fs = std::filesystem;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

std::string probe(const std::string& fn) {
  char buf[4096];
  return std::string(realpath(kWorkload.c_str(), buf)) + ":" + fn;
}

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("mcp-counts-" + std::to_string(getpid()) + "-" + name)).string();
}

// Every kept call is delivered, lost or orphaned; nothing is kept unseen.
void expect_accounting_adds_up(const mcp::test::SummaryRow& row, const std::string& err) {
  EXPECT_EQ(row.kept, row.delivered + row.lost + row.orphaned) << err;
  EXPECT_GE(row.seen, row.kept + row.quota_dropped) << err;
}

int64_t triangle(int64_t n) { return n * (n + 1) / 2; }

TEST(LatencyPairing, RecursionToDepthFourCalledTwiceDeliversEightCalls) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_recurse", "--latency", "--", kWorkload,
                        "recurse", "2", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 8u) << r.err;
  std::multiset<int64_t> depths;
  for (const auto& e : events) {
    const int64_t n = e["args"][0];
    depths.insert(n);
    EXPECT_EQ(e["ret"].get<int64_t>(), triangle(n)) << e.dump();  // each return with its own call
  }
  EXPECT_EQ(depths, (std::multiset<int64_t>{1, 1, 2, 2, 3, 3, 4, 4}));
  const auto row = parse_summary(r.err)[probe("mcp_recurse")];
  EXPECT_EQ(row.kept, 8u);
  EXPECT_EQ(row.delivered, 8u);
  EXPECT_EQ(row.orphaned, 0u);
}

TEST(LatencyPairing, SampledOutInnerCallNeverPairsWithItsKeptOuterCall) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_recurse", "--latency", "--sample-rate", "0.5",
                        "--", kWorkload, "recurse", "2000", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_GT(events.size(), 1000u);
  int mismatched = 0;
  for (const auto& e : events) mismatched += e["ret"].get<int64_t>() != triangle(e["args"][0].get<int64_t>());
  EXPECT_EQ(mismatched, 0) << "returns paired with another frame's call";
  const auto row = parse_summary(r.err)[probe("mcp_recurse")];
  EXPECT_EQ(row.delivered, events.size());
  EXPECT_EQ(row.orphaned, 0u);
  expect_accounting_adds_up(row, r.err);
}

TEST(LatencyPairing, CallsLeftByLongjmpAreOrphanedAndNeverPairedWithLaterCalls) {
  MCP_REQUIRE_BPF();
  for (const std::string rate : {"1", "0.5"}) {
    auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_maybe_jump", "--latency", "--sample-rate",
                          rate, "--", kWorkload, "longjmp", "2000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto events = parse_json_lines(r.out);
    for (const auto& e : events) {
      EXPECT_EQ(e["args"][1], 0) << "rate " << rate << ": a jumping call reported as returned: " << e.dump();
      EXPECT_EQ(e["ret"], e["args"][0]) << e.dump();
    }
    const auto row = parse_summary(r.err)[probe("mcp_maybe_jump")];
    expect_accounting_adds_up(row, r.err);
    if (rate == "1") {
      EXPECT_EQ(row.kept, 2000u);
      EXPECT_EQ(row.delivered, 1000u);
      EXPECT_EQ(row.orphaned, 1000u) << r.err;
    } else {
      EXPECT_GT(row.orphaned, 0u) << r.err;
    }
  }
}

TEST(Accounting, ASyscallThatNeverReturnsIsCountedOrphaned) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--syscall", "exit_group", "--latency", "--", kWorkload, "calls", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)["syscall:exit_group"];
  EXPECT_EQ(row.kept, 1u) << r.err;
  EXPECT_EQ(row.orphaned, 1u) << r.err;
  EXPECT_EQ(row.delivered, 0u);
}

TEST(Accounting, DetachingBeforeTheLastDrainMakesKeptEqualDeliveredPlusLostUnderLoss) {
  MCP_REQUIRE_BPF();
  // The workload outlives the agent: --duration ends the trace while calls keep coming,
  // with a 4K ring buffer that loses most of them.
  const pid_t wl = fork();
  if (wl == 0) {
    execl(kWorkload.c_str(), kWorkload.c_str(), "rate", "200000", "60", nullptr);
    _exit(127);
  }
  for (const bool latency : {false, true}) {
    std::vector<std::string> argv = {kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--pid",
                                     std::to_string(wl), "--ringbuf-size", "4K", "--duration", "2s", "--output",
                                     "/dev/null"};
    if (latency) argv.push_back("--latency");
    auto r = run_command(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto row = parse_summary(r.err)[probe("mcp_work")];
    EXPECT_GT(row.lost, 0u) << r.err;
    EXPECT_GT(row.delivered, 0u) << r.err;
    expect_accounting_adds_up(row, r.err);
  }
  kill(wl, SIGKILL);
  waitpid(wl, nullptr, 0);
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Issue 17: counters are exact while threads on every CPU, several per CPU, hit one probe
// at once (atomic adds into per-CPU slots: a program preempted by another on its CPU
// loses no update), for each program family. Every kept event carries its own time:
// the clock is read only once an event is sampled in, never left unread on a kept one.
TEST(Accounting, CountsStayExactWithThreadsOnEveryCpuHammeringOneProbe) {
  MCP_REQUIRE_BPF();
  constexpr uint64_t kThreads = 6, kCalls = 25000;
  struct Case {
    std::vector<std::string> probe;
    std::string row;
    bool syscalls;
  };
  const std::vector<Case> cases = {
      {{"--uprobe", probe("mcp_work")}, probe("mcp_work"), false},
      {{"--uprobe", probe("mcp_work"), "--latency"}, probe("mcp_work"), false},
      {{"--syscall", "getppid"}, "syscall:getppid", true},
  };
  for (const auto& c : cases) {
    const std::string events = temp_file("threads.json");
    std::vector<std::string> argv = {kAgent, "trace", "--sample-rate", "0.5", "--output", events};
    argv.insert(argv.end(), c.probe.begin(), c.probe.end());
    argv.insert(argv.end(), {"--", kWorkload, "threads", std::to_string(kThreads), std::to_string(kCalls)});
    if (c.syscalls) argv.push_back("getppid");
    const uint64_t before = monotonic_ns();
    auto r = run_command(argv);
    const uint64_t after = monotonic_ns();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto row = parse_summary(r.err)[c.row];
    EXPECT_EQ(row.seen, kThreads * kCalls) << c.probe.back() << "\n" << r.err;
    expect_accounting_adds_up(row, r.err);
    EXPECT_EQ(row.quota_dropped, 0u);
    EXPECT_NEAR(static_cast<double>(row.kept), 0.5 * kThreads * kCalls, 0.02 * kThreads * kCalls) << r.err;
    uint64_t read = 0;
    for (const auto& e : parse_json_lines(mcp::test::slurp(events))) {
      const auto t = e["ktime_ns"].get<uint64_t>();
      ASSERT_TRUE(t > before && t < after) << e.dump();
      read++;
    }
    fs::remove(events);
    EXPECT_EQ(read, row.delivered) << r.err;
  }
}

TEST(ProcessTree, ChildrenOfTheCommandAreTracedLikeStraceF) {
  MCP_REQUIRE_BPF();
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--", kWorkload, "fork", "3", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_json_lines(r.out);
  std::set<int> pids;
  for (const auto& e : events) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(events.size(), 4000u) << r.err;  // the parent, two forked children, one exec'd child
  EXPECT_EQ(pids.size(), 4u);

  r = run_command(
      {kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--no-follow", "--", kWorkload, "fork", "3", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  events = parse_json_lines(r.out);
  pids.clear();
  for (const auto& e : events) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(events.size(), 1000u) << r.err;
  EXPECT_EQ(pids.size(), 1u);
}

// `--pid P`: the agent follows P's child after P exits, and exits with the summary once the
// child is gone too (`timeout` turns a hang into a failure).
TEST(ProcessTree, PidTraceEndsWithTheSummaryWhenTheTreeIsGone) {
  MCP_REQUIRE_BPF();
  for (const bool follow : {true, false}) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t wl = fork();
    if (wl == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      execl(kWorkload.c_str(), kWorkload.c_str(), "handoff", "1000", nullptr);
      _exit(127);
    }
    close(out[1]);
    const std::string events = temp_file("handoff.json");
    std::vector<std::string> argv = {"timeout", "60", kAgent, "trace", "--pid", std::to_string(wl), "--uprobe",
                                     kWorkload + ":mcp_work", "--syscall", "getppid", "--output", events};
    if (!follow) argv.push_back("--no-follow");
    auto agent = std::async(std::launch::async, [&] { return run_command(argv); });
    // Attached once the workload's getppid calls show up; then let it hand off to its child.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (mcp::test::slurp(events).find("getppid") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(wl, SIGUSR1);
    char buf[32] = {};
    ASSERT_GT(read(out[0], buf, sizeof(buf) - 1), 0);
    close(out[0]);
    const int child = atoi(buf);
    waitpid(wl, nullptr, 0);
    auto r = agent.get();
    ASSERT_EQ(r.exit_code, 0) << "follow=" << follow << " (124: still running after its tree exited)\n" << r.err;
    EXPECT_NE(r.err.find("summary"), std::string::npos) << r.err;
    size_t from_child = 0;
    for (const auto& e : parse_json_lines(mcp::test::slurp(events)))
      from_child += e["pid"].get<int>() == child && e["kind"] == "uprobe";
    fs::remove(events);
    EXPECT_EQ(from_child, follow ? 1000u : 0u) << "follow=" << follow;
  }
}

// The kernel's trace-id decisions are OpenTelemetry's, computed here from the spec
// (tracestate-probability-sampling.md): R = the trace id's low 56 bits, T = 2^56 - (A >> 8)
// with A the 64-bit acceptance threshold, keep iff R >= T, th = T in 14 hex digits with
// trailing zeros trimmed.
TEST(OtelSampling, KernelKeepsExactlyTheOtelReferenceSetWithItsTh) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 20000;
  constexpr uint64_t kSeed = 1234;
  for (const auto& [rate, th] : std::vector<std::pair<double, std::string>>{{0.5, "8"}, {0.01, "fd70a3d70a3d71"}}) {
    const std::string events = temp_file("otel.json");
    auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_handle", "--sample-rate",
                          std::to_string(rate), "--trace-id-arg", "0:hex32", "--output", events, "--", kWorkload,
                          "traceid", std::to_string(kCalls), std::to_string(kSeed)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<uint64_t> kept;
    const auto ids = mcp::test::workload_trace_ids(kCalls, kSeed);
    for (const auto& e : parse_json_lines(mcp::test::slurp(events))) {
      const auto call = e["args"][1].get<uint64_t>();
      kept.insert(call);
      EXPECT_EQ(e.value("th", ""), th) << e.dump();
      // The kernel records the whole id it decided on.
      ASSERT_LT(call, ids.size());
      EXPECT_EQ(e.value("trace_id", ""), ids[call].hex()) << e.dump();
    }
    fs::remove(events);
    const uint64_t accept = mcp::probability_to_threshold(rate);
    const uint64_t t = (uint64_t{1} << 56) - (accept >> 8);
    std::set<uint64_t> expected;
    uint64_t s = kSeed;
    auto splitmix = [&s] {
      uint64_t z = (s += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    for (uint64_t i = 0; i < kCalls; i++) {
      splitmix();                                     // the high half of the id
      const uint64_t r56 = splitmix() & ((uint64_t{1} << 56) - 1);  // the low 7 bytes
      if (r56 >= t) expected.insert(i);
    }
    EXPECT_EQ(kept, expected) << "rate " << rate;
    EXPECT_NEAR(static_cast<double>(expected.size()), kCalls * rate, 5 * std::sqrt(kCalls * rate));
  }
}

// Without --latency a syscall runs one program (at exit) that reads the arguments from
// the task's saved registers; with it the entry program adds the duration.
TEST(SyscallProbe, OnlyLatencyAddsTheEntryProgramAndArgumentsAreRead) {
  MCP_REQUIRE_BPF();
  for (const bool latency : {false, true}) {
    const std::string events = temp_file("syscalls.json");
    std::vector<std::string> argv = {kAgent, "trace", "--syscall", "getppid", "--syscall", "write",
                                     "--output", events};
    if (latency) argv.push_back("--latency");
    argv.insert(argv.end(), {"--", kWorkload, "rate", "2000", "0.3", "getppid"});
    auto r = run_command(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    size_t getppid = 0, writes = 0;
    for (const auto& e : parse_json_lines(mcp::test::slurp(events))) {
      EXPECT_EQ(e.contains("duration_ns"), latency) << e.dump();
      if (e["probe"] == "syscall:getppid") {
        getppid++;
        EXPECT_GT(e["ret"].get<int>(), 0);
      } else if (e["probe"] == "syscall:write") {
        writes++;  // the workload's "calls N\n" on stdout
        EXPECT_EQ(e["args"][0], 1) << e.dump();
        EXPECT_EQ(e["ret"], e["args"][2]) << e.dump();
      }
    }
    fs::remove(events);
    EXPECT_EQ(getppid, parse_summary(r.err)["syscall:getppid"].seen);
    EXPECT_GT(getppid, 0u);
    EXPECT_EQ(writes, 1u);
  }
}

// EST_COUNT scales each second's delivered weights by sampled-in / delivered, so what the
// quota dropped or the ring lost is still counted.
TEST(Estimates, CorrectedCountSurvivesAQuotaDroppingNinetyPercentAndRingLoss) {
  MCP_REQUIRE_BPF();
  {
    auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--sample-rate", "0.5",
                          "--default-quota", "1000:100", "--output", "/dev/null", "--", kWorkload, "rate", "20000",
                          "4"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    uint64_t calls = 0;
    ASSERT_EQ(sscanf(r.out.c_str(), "calls %" SCNu64, &calls), 1) << r.out;
    const auto row = parse_summary(r.err)[probe("mcp_work")];
    EXPECT_EQ(row.seen, calls);
    EXPECT_GT(row.quota_dropped, 8 * row.kept) << r.err;  // the quota drops ~90% of what is sampled in
    EXPECT_NEAR(row.estimated, static_cast<double>(calls), 0.05 * static_cast<double>(calls)) << r.err;
  }
  {
    constexpr uint64_t kCalls = 300000;
    auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--sample-rate", "0.5",
                          "--ringbuf-size", "4K", "--output", "/dev/null", "--", kWorkload, "calls",
                          std::to_string(kCalls)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto row = parse_summary(r.err)[probe("mcp_work")];
    EXPECT_GT(row.lost, row.delivered / 10) << r.err;
    EXPECT_NEAR(row.estimated, static_cast<double>(kCalls), 0.05 * kCalls) << r.err;
  }
}

// Slow-launch mode replaces only the probability step: a tenant quota still caps what a slow
// process ships (two tokens per CPU here, one of which the internal __cudaGetKernel probe may
// take), and every launch is counted once.
TEST(CudaSlowMode, HonoursTheTenantQuota) {
  MCP_REQUIRE_BPF();
  const std::string bin = std::string(MCP_TEST_DIR) + "/cuda_launch_shared";
  struct stat st;
  if (stat(bin.c_str(), &st) != 0) GTEST_SKIP() << "CUDA toolkit (nvcc) not installed";
  const std::string events = temp_file("cuda.json");
  auto r = run_command({kAgent, "trace", "--cuda", "--slow-launch", "1ns", "--sample-rate", "0.000001",
                        "--default-quota", "1:2", "--output", events, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t launches = 0;
  for (const auto& e : parse_json_lines(mcp::test::slurp(events)))
    if (e["cuda"].contains("kernel")) launches++;
  fs::remove(events);
  uint64_t quota_dropped = 0;
  for (const auto& [name, row] : parse_summary(r.err)) {
    quota_dropped += row.quota_dropped;
    expect_accounting_adds_up(row, r.err);
  }
  const auto cpus = static_cast<size_t>(sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_GE(launches, 1u) << r.err;
  EXPECT_LE(launches, std::min<size_t>(2 * cpus, 4)) << "slow mode bypassed the quota\n" << r.err;
  EXPECT_GE(quota_dropped, 5 - launches) << r.err;
}

// Issue 18: with uprobe sessions the entry decides whether its return runs, so a
// --latency call the sampler drops costs one trap, not two. Runs are counted by the
// kernel (bpf_stats); --no-follow attaches to the workload alone.
TEST(UprobeSession, SampledOutLatencyCallsRunNoReturnProgram) {
  MCP_REQUIRE_BPF();
  mcp::test::BpfStats stats;
  if (!stats.enabled()) GTEST_SKIP() << "BPF_ENABLE_STATS refused";
  // --no-windows: every call traps (sampling calls); sampling windows are windows_test.cpp's.
  auto r = run_command({kAgent, "trace", "--uprobe", probe("mcp_work"), "--latency", "--sample-rate", "0.01",
                        "--no-windows", "--no-follow", "--", kWorkload, "calls", "2000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.err.find("uprobe returns: session") == std::string::npos)
    GTEST_SKIP() << "no uprobe sessions on this kernel\n" << r.err;
  const auto rows = parse_summary(r.err);
  ASSERT_EQ(rows.count(probe("mcp_work")), 1u) << r.err;
  const auto& row = rows.at(probe("mcp_work"));
  EXPECT_EQ(row.seen, 2000u) << r.err;
  EXPECT_LT(row.kept, 200u) << r.err;
  const auto runs = mcp::test::program_runs(r.err);
  ASSERT_TRUE(runs.count("mcp_uprobe_session")) << r.err;
  // one run per call at entry, one more only for each kept call's return
  EXPECT_EQ(runs.at("mcp_uprobe_session"), row.seen + row.kept) << r.err;
  EXPECT_EQ(runs.count("mcp_uretprobe") ? runs.at("mcp_uretprobe") : 0u, 0u) << r.err;
  EXPECT_EQ(row.delivered, row.kept) << r.err;
}

// The fallback (MCP_UPROBE_SESSION=off, or a kernel without sessions) still pairs every
// kept call with its return, and says which mode it used.
TEST(UprobeSession, FallbackUretprobesPairTheSameCalls) {
  MCP_REQUIRE_BPF();
  auto r = run_command({"/usr/bin/env", "MCP_UPROBE_SESSION=off", kAgent, "trace", "--uprobe", probe("mcp_recurse"),
                        "--latency", "--", kWorkload, "recurse", "2", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("uprobe returns: uretprobe"), std::string::npos) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 8u) << r.err;
  for (const auto& e : events) EXPECT_EQ(e["ret"].get<int64_t>(), triangle(e["args"][0].get<int64_t>())) << e.dump();
}

}  // namespace
