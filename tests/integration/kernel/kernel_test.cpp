// The kernel tier (issue 35): the checks whose outcome depends on the kernel the agent runs on,
// on the real agent and real BPF. Each runs twice: as the kernel is ("native"), and with every
// optional feature turned off as on Linux 5.10 ("fallbacks", MCP_KERNEL_FEATURES_OFF), so the
// fallback programs are exercised on every kernel CI boots, this machine's included.
// scripts/vmtest runs this tier on Debian's 5.10, 6.1 and 6.12; nothing here assumes a timing.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/run_command.h"
#include "../../support/trace_ids.h"
#include "../../support/wait_until.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::parse_summary;
using mcp::test::run_command;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";
const std::string kCudaLaunch = std::string(MCP_TEST_DIR) + "/cuda_launch_shared";
// Every feature the agent can run without (loader/kernel_features.h).
const std::string kAllOff =
    "task_btf,task_storage,fetch_atomics,attach_cookie,ancestor_cgroup,task_pt_regs,find_vma,uprobe_multi,"
    "uprobe_sessions";

std::string probe(const std::string& fn) {
  char buf[4096];
  return std::string(realpath(kWorkload.c_str(), buf)) + ":" + fn;
}

// Linux version of the running kernel as major * 1000 + minor.
int kernel_version() {
  utsname u{};
  uname(&u);
  int major = 0, minor = 0;
  sscanf(u.release, "%d.%d", &major, &minor);
  return major * 1000 + minor;
}

int parse_version(const std::string& v) {
  int major = 0, minor = 0;
  sscanf(v.c_str(), "%d.%d", &major, &minor);
  return major * 1000 + minor;
}

class KernelTier : public ::testing::TestWithParam<std::string> {
 protected:
  bool fallbacks() const { return GetParam() == "fallbacks"; }
  // The agent with this mode's environment.
  mcp::test::CommandResult agent(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"/usr/bin/env", "MCP_KERNEL_FEATURES_OFF=" + (fallbacks() ? kAllOff : ""), kAgent};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
  }
};

// `version` lists every feature; a feature the running kernel's version brought is found
// (so the README's matrix, which this list fills, holds on every kernel CI boots), and a
// feature turned off is reported off with what the agent does instead.
TEST_P(KernelTier, VersionListsTheFeaturesTheKernelHas) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  static const std::regex line(R"(^  (\w+)\s+(yes|off)\s+(.*) \((\d+\.\d+)\)(: .*)?$)");
  std::istringstream in(r.out);
  std::string l;
  int listed = 0;
  while (std::getline(in, l)) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    listed++;
    const std::string name = m[1], state = m[2];
    const bool optional = ("," + kAllOff + ",").find("," + name + ",") != std::string::npos;
    if (fallbacks() && optional) {
      EXPECT_EQ(state, "off") << l;
      EXPECT_TRUE(m[5].matched) << "an off feature says what the agent does instead: " << l;
    } else if (parse_version(m[4]) <= kernel_version()) {
      EXPECT_EQ(state, "yes") << "Linux " << m[4] << " brought it, and this kernel is newer: " << l;
    }
  }
  EXPECT_EQ(listed, 11) << r.out;
}

TEST_P(KernelTier, SyscallsCountedExactlyWithAndWithoutLatency) {
  MCP_REQUIRE_BPF();
  for (const bool latency : {false, true}) {
    std::vector<std::string> args = {"trace", "--syscall", "getppid", "-o", "/dev/null"};
    if (latency) args.push_back("--latency");
    for (const char* a : {"--", kWorkload.c_str(), "getppid", "5000"}) args.push_back(a);
    const auto r = agent(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto row = parse_summary(r.err)["syscall:getppid"];
    EXPECT_EQ(row.seen, 5000u) << r.err;
    EXPECT_EQ(row.kept, 5000u) << r.err;
    EXPECT_EQ(row.delivered, 5000u) << r.err;
  }
}

// Arguments, return values and durations pair up on the uretprobe path (every kernel before
// 6.13 takes it), and every kept call reaches the output.
TEST_P(KernelTier, UprobesWithLatencyPairEveryCall) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "--latency", "--", kWorkload, "calls", "3000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  ASSERT_EQ(events.size(), 3000u) << r.err;
  int64_t expected_first = 0;
  for (const auto& e : events) {
    ASSERT_TRUE(e.contains("duration_ns")) << e.dump();
    EXPECT_EQ(e["args"][1].get<int64_t>(), 2) << e.dump();
    if (e["args"][0].get<int64_t>() == expected_first) expected_first++;
  }
  EXPECT_EQ(expected_first, 3000) << "calls out of order or missing";
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 3000u);
  EXPECT_EQ(row.kept, 3000u);
  EXPECT_EQ(row.orphaned, 0u);
}

// A call left by longjmp never pairs with a later call's return: the next call in its frame
// finds its entry and counts it orphaned (the map update's -EEXIST must be recognised on
// kernels before 6.5, where it arrives as a 32-bit value).
TEST_P(KernelTier, CallsLeftByLongjmpAreOrphanedNotPaired) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_maybe_jump", "--latency", "--", kWorkload, "longjmp",
                        "2000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = parse_json_lines(r.out);
  EXPECT_EQ(events.size(), 1000u) << r.err;
  int mispaired = 0;
  for (const auto& e : events) mispaired += e["args"][1] != 0 || e["ret"] != e["args"][0];
  EXPECT_EQ(mispaired, 0) << "returns paired with a call that jumped away";
  const auto row = parse_summary(r.err)[probe("mcp_maybe_jump")];
  EXPECT_EQ(row.kept, 2000u) << r.err;
  EXPECT_EQ(row.orphaned, 1000u) << r.err;
  EXPECT_EQ(row.delivered, 1000u) << r.err;
}

// Probability sampling in the kernel: the kept count is a binomial draw (within 6 sigma) and
// the estimate stands for every call.
TEST_P(KernelTier, SampledUprobeKeepsItsShareAndEstimatesTheRest) {
  MCP_REQUIRE_BPF();
  const int n = 20000;
  const double p = 0.1;
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "--sample-rate", "0.1", "--no-windows", "-o",
                        "/dev/null", "--", kWorkload, "calls", std::to_string(n)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, static_cast<uint64_t>(n));
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(row.kept), n * p, 6 * sigma) << r.err;
  EXPECT_NEAR(row.estimated, n, 6 * sigma / p) << r.err;
}

// Trace-id sampling: a call is kept when the id it carries (a W3C hex id read from user memory)
// is, and the record carries the whole id it was decided on.
TEST_P(KernelTier, TraceIdDecisionsFollowTheIdAndRecordIt) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 2000;
  constexpr uint64_t kSeed = 77;
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_handle", "--sample-rate", "0.5", "--trace-id-arg",
                        "0:hex32", "--", kWorkload, "traceid", std::to_string(kCalls), std::to_string(kSeed)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ids = mcp::test::workload_trace_ids(kCalls, kSeed);
  const auto events = parse_json_lines(r.out);
  // OpenTelemetry's rule at 0.5: kept iff the id's randomness (low 56 bits) is at least 2^55
  size_t expected = 0;
  for (const auto& id : ids) expected += id.randomness() >= uint64_t{1} << 55;
  EXPECT_EQ(events.size(), expected) << r.err;
  for (const auto& e : events) {
    const auto call = e["args"][1].get<uint64_t>();
    ASSERT_LT(call, ids.size());
    EXPECT_EQ(e.value("trace_id", ""), ids[call].hex()) << e.dump();
    EXPECT_GE(ids[call].randomness(), uint64_t{1} << 55) << e.dump();
  }
}

// Rate control: the controller lowers the kernel's threshold until the kept rate is near the
// target, and the weights still stand for every call. Loose bounds: no timing is assumed.
TEST_P(KernelTier, TargetRateLowersWhatIsKeptAndTheEstimateHolds) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "--target-qps", "200", "--no-windows", "-o",
                        "/dev/null", "--", kWorkload, "rate", "4000", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  ASSERT_GT(row.seen, 3000u) << r.err;
  EXPECT_LT(row.kept, row.seen / 2) << "the controller lowered the rate: " << r.err;
  EXPECT_NEAR(row.estimated, static_cast<double>(row.seen), 0.3 * row.seen) << r.err;
}

// Forwarding: kept events reach a real broker on loopback over the compact wire and a
// subscriber receives each call once.
TEST_P(KernelTier, ForwardedEventsReachASubscriberOnce) {
  MCP_REQUIRE_BPF();
  using namespace std::chrono_literals;
  constexpr int kCalls = 1000;
  const auto dir = mcp::test::make_temp_dir("mcp-kernel-tier");
  mcp::test::BrokerProcess broker({"--state-dir", (dir / "state").string()}, dir / "broker.log");
  std::vector<std::string> sub_argv = {kAgent, "subscribe", "--broker", broker.address(), "--service", "tier",
                                       "--max-events", std::to_string(kCalls)};
  auto sub = std::async(std::launch::async, [sub_argv] { return run_command(sub_argv); });
  ASSERT_TRUE(mcp::test::wait_until([&] { return mcp::test::broker_stats(broker.address()).subscribers() > 0; }, 20s));
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "--broker", broker.address(), "--service",
                        "tier", "--", kWorkload, "calls", std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto s = sub.get();
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::set<uint64_t> calls;
  for (const auto& e : parse_json_lines(s.out)) calls.insert(e["args"][0].get<uint64_t>());
  EXPECT_EQ(calls.size(), static_cast<size_t>(kCalls)) << "each call exactly once";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// A tenant quota on the root cgroup: found by the cgroup ancestor walk (the helper, or the
// kernfs parents before 5.14) and enforced by the token bucket (with or without fetching
// atomics): far fewer kept than called, and every call accounted for.
TEST_P(KernelTier, TenantQuotaOnAnAncestorCgroupCapsWhatIsKept) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "--tenant-quota", "/=100:50", "-o", "/dev/null",
                        "--", kWorkload, "calls", "20000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 20000u) << r.err;
  EXPECT_GT(row.quota_dropped, 10000u) << r.err;
  EXPECT_EQ(row.kept + row.quota_dropped, row.seen) << r.err;
  EXPECT_GE(row.kept, 1u) << r.err;
}

// A wildcard: one probe per matching function, through one uprobe_multi link where the
// kernel has them (6.6+), else one link each; every probe counts its own calls exactly.
TEST_P(KernelTier, WildcardProbesCountTheirOwnCalls) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_*", "-o", "/dev/null", "--", kWorkload, "calls", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = parse_summary(r.err);
  EXPECT_GE(rows.size(), 5u) << r.err;
  EXPECT_EQ(rows[probe("mcp_work")].seen, 1000u) << r.err;
  EXPECT_EQ(rows[probe("mcp_work")].kept, 1000u) << r.err;
  EXPECT_EQ(rows[probe("mcp_recurse")].seen, 0u) << r.err;
}

// Children followed like strace -f: fork's tracepoint adds each to the traced tree.
TEST_P(KernelTier, ForkedChildrenAreFollowed) {
  MCP_REQUIRE_BPF();
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "-o", "/dev/null", "--", kWorkload, "fork", "4",
                        "500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, 2500u) << r.err;  // the parent and 4 children, 500 calls each
  EXPECT_EQ(row.kept, 2500u) << r.err;
}

// Launches named and with their geometry, from a process that outlives them: the kernel
// places the host function with bpf_find_vma (5.17+), else the agent reads the process's maps.
TEST_P(KernelTier, CudaLaunchesNamedWithGeometry) {
  MCP_REQUIRE_BPF();
  struct stat st;
  if (stat(kCudaLaunch.c_str(), &st) != 0) GTEST_SKIP() << "CUDA toolkit (nvcc) not installed";
  const auto r = agent({"trace", "--cuda", "--", kCudaLaunch, "5", "chevrons", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string events;  // the fixture prints its own lines between the agent's
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l[0] == '{') events += l + "\n";
  int launches = 0;
  for (const auto& e : parse_json_lines(events)) {
    if (!e.contains("cuda") || !e["cuda"].contains("kernel")) continue;
    launches++;
    EXPECT_EQ(e["cuda"]["kernel"], "vecAdd(float*, int)") << e.dump();
    EXPECT_EQ(e["cuda"]["grid"], nlohmann::json::array({4, 2, 1})) << e.dump();
    EXPECT_EQ(e["cuda"]["block"], nlohmann::json::array({64, 1, 1})) << e.dump();
  }
  EXPECT_EQ(launches, 5) << r.out << r.err;
}

// Issue 50: a short-lived process whose kernels live in its static CUDA runtime (nvcc's
// default) is gone before its events are read; without bpf_find_vma (5.10) its launches were
// all unnamed. `trace` starts it, so it reads its mappings when exec returns.
TEST_P(KernelTier, ShortLivedStaticRuntimeLaunchesAreNamed) {
  MCP_REQUIRE_BPF();
  const std::string exe = std::string(MCP_TEST_DIR) + "/cuda_launch_static";
  struct stat st;
  if (stat(exe.c_str(), &st) != 0) GTEST_SKIP() << "CUDA toolkit (nvcc) not installed";
  const auto r = agent({"trace", "--cuda", "--", exe, "5", "chevrons"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int named = 0;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    if (l.empty() || l[0] != '{') continue;
    const auto e = nlohmann::json::parse(l);
    if (e.contains("cuda") && e["cuda"].value("kernel", "") == "vecAdd(float*, int)") named++;
  }
  EXPECT_EQ(named, 5) << r.out << r.err;
}

// Issue 50: the estimate a sampled uprobe prints holds the truth on every kernel: a short
// program is sampled call by call (its range holds the count), a call-bound loop too long for
// call sampling gets no estimate instead of a wrong one.
TEST_P(KernelTier, LowRateEstimatesHoldOrAreWithheld) {
  MCP_REQUIRE_BPF();
  const int n = 5000;  // under qemu a trap costs hundreds of microseconds: within call sampling's budget
  const auto r = agent({"trace", "--uprobe", kWorkload + ":mcp_work", "-r", "0.01", "-o", "/dev/null", "--", kWorkload,
                        "calls", std::to_string(n)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = parse_summary(r.err)[probe("mcp_work")];
  EXPECT_EQ(row.seen, static_cast<uint64_t>(n)) << "every call of a short program sampled: " << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(\s(calls|windows)\s+\d+\s+(\d+)\.\.(\d+))"))) << r.err;
  EXPECT_LE(std::stod(m[2]), n) << r.err;
  EXPECT_GE(std::stod(m[3]), n) << r.err;
}

// Issue 51: each optional feature forced off alone still loads and traces (task_btf off alone
// failed every trace: the CUDA multi program needs bpf_find_vma, which task_btf takes along).
TEST(KernelFeaturesOff, EachFeatureOffAloneStillTraces) {
  MCP_REQUIRE_BPF();
  std::stringstream names(kAllOff);
  for (std::string f; std::getline(names, f, ',');) {
    const auto r = run_command({"/usr/bin/env", "MCP_KERNEL_FEATURES_OFF=" + f, kAgent, "trace", "--uprobe",
                                kWorkload + ":mcp_work", "-o", "/dev/null", "--", kWorkload, "calls", "200"});
    ASSERT_EQ(r.exit_code, 0) << f << ": " << r.err;
    EXPECT_EQ(parse_summary(r.err)[probe("mcp_work")].seen, 200u) << f << ": " << r.err;
  }
}

// Issue 51: MCP_KERNEL_FEATURES_OFF names optional features or `all`; a required feature or an
// unknown name is refused in one line (exit 2) instead of turning nothing off in silence.
TEST(KernelFeaturesOff, UnknownOrRequiredNamesAreRefusedAndAllTurnsEveryOptionalOneOff) {
  MCP_REQUIRE_BPF();
  for (const std::string bad : {"bogus", "ringbuf", "btf", "task_btf,nope"}) {
    const auto r = run_command({"/usr/bin/env", "MCP_KERNEL_FEATURES_OFF=" + bad, kAgent, "version"});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("MCP_KERNEL_FEATURES_OFF"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
  const auto all = run_command({"/usr/bin/env", "MCP_KERNEL_FEATURES_OFF=all", kAgent, "version"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::stringstream names(kAllOff);
  for (std::string f; std::getline(names, f, ',');)
    EXPECT_TRUE(std::regex_search(all.out, std::regex("\\s" + f + "\\s+off\\s"))) << f << ": " << all.out;
}

// Issue 51: without attach cookies a USDT probe is attached per process: the command trace
// started is that process (the docs say a pid or a command is enough; a command was refused).
TEST(KernelFeaturesOff, UsdtWithoutCookiesFollowsTheCommand) {
  MCP_REQUIRE_BPF();
  const auto r = run_command({"/usr/bin/env", "MCP_KERNEL_FEATURES_OFF=attach_cookie", kAgent, "trace", "--usdt",
                              kWorkload + ":mcp:tick", "-o", "/dev/null", "--", kWorkload, "usdt", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  char buf[4096];
  EXPECT_EQ(parse_summary(r.err)["usdt:" + std::string(realpath(kWorkload.c_str(), buf)) + ":mcp:tick"].seen, 50u)
      << r.err;
}

// Without attach cookies a USDT probe is attached through libbpf's address table, per
// process: system-wide it is refused in one line (never a verifier log); with cookies it runs.
TEST_P(KernelTier, UsdtSystemWideRunsWhereTheKernelHasAttachCookies) {
  MCP_REQUIRE_BPF();
  const bool cookies = !fallbacks() && kernel_version() >= 5015;
  const auto r = agent({"trace", "--usdt", "/usr/bin/python3:python:line", "--duration", "100ms"});
  if (cookies) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return;
  }
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs bpf_get_attach_cookie (5.15)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("verifier"), std::string::npos) << "no raw verifier output: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(Modes, KernelTier, ::testing::Values("native", "fallbacks"),
                         [](const auto& info) { return info.param; });

}  // namespace
