// Runtime tier for adaptive sampling (issue 4): target-QPS control, tenant quotas
// on real cgroups, consistent trace-id sampling checked against the userspace
// reference, all through the real agent binary and real BPF.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "../../support/cgroup.h"
#include "../../support/process.h"
#include "../../support/quota.h"
#include "../../support/run_command.h"
#include "common/event.h"
#include "control/tenant_quota.h"
#include "control/trace_id_arg.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::run_command;
using mcp::test::spawn_in_cgroup;
namespace fs = std::filesystem;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("mcp-" + std::to_string(getpid()) + "-" + name)).string();
}

TEST(TargetQps, KeptRateHoldsTheTargetAndWeightsRestoreTheTrueCount) {
  MCP_REQUIRE_BPF();
  const std::string events = temp_file("qps.json");
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--target-qps", "2000", "--output",
                        events, "--", kWorkload, "rate", "50000", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t true_calls = 0;
  ASSERT_EQ(sscanf(r.out.c_str(), "calls %" SCNu64, &true_calls), 1) << r.out;
  auto kept = parse_json_lines(mcp::test::slurp(events));
  fs::remove(events);
  ASSERT_FALSE(kept.empty());
  const uint64_t t0 = kept.front()["ts_ns"];
  std::map<uint64_t, int> per_second;
  double estimated = 0;
  for (const auto& e : kept) {
    per_second[(e["ts_ns"].get<uint64_t>() - t0) / 1000000000ull]++;
    estimated += e["weight"].get<double>();
  }
  // Seconds 3..8 are whole seconds after settling (the run lasts 10 s). The controller holds
  // the mean tightly; one second alone moves by more than 10% when the scheduler delays the
  // paced workload and it catches up in a burst the controller answers a window later (seen
  // at 2221, 2409 and 2615 on a busy 2-core machine), so single seconds get a wider band; one
  // that lost the steering altogether would keep the offered 50000.
  double settled = 0;
  for (uint64_t s = 3; s <= 8; s++) {
    settled += per_second[s];
    EXPECT_NEAR(per_second[s], 2000, 800) << "second " << s << " (offered " << true_calls / 10 << "/s)";
  }
  EXPECT_NEAR(settled / 6, 2000, 100) << "mean kept per second over seconds 3..8";
  EXPECT_NEAR(estimated, static_cast<double>(true_calls), 0.05 * static_cast<double>(true_calls));
}

TEST(TenantQuota, NoisyCgroupIsHeldToItsQuotaWhileTheQuietOneKeepsEverything) {
  MCP_REQUIRE_BPF();
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-test-");
  const std::string base = tree->relative_root();  // "/mcp-test-PID", as tenants are named
  const fs::path noisy = tree->add("noisy");
  const auto id_of = [&](const fs::path& p) { return mcp::cgroup::resolve_cgroup_id(p.string(), tree->mount()); };
  // Two cgroups in one quota bucket would share a token bucket: pick a quiet
  // cgroup whose id hashes elsewhere (1 in 64 names collide).
  const uint32_t noisy_bucket = mcp::control::tenant_bucket(id_of(noisy));
  fs::path quiet;
  std::string quiet_name;
  for (int i = 0; i < 16 && quiet.empty(); i++) {
    quiet_name = "quiet" + std::to_string(i);
    const fs::path candidate = tree->add(quiet_name);
    if (mcp::control::tenant_bucket(id_of(candidate)) != noisy_bucket) quiet = candidate;
  }
  ASSERT_FALSE(quiet.empty()) << "no quiet cgroup outside the noisy one's bucket";

  constexpr double kQuota = 1000, kBurst = 200;
  const fs::path dir = fs::temp_directory_path() / ("mcp-tenants-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string events = (dir / "tenants.json").string();
  mcp::test::Process agent({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--output", events,
                            "--tenant-quota", base + "/noisy=1000:200", "--tenant-quota",
                            base + "/" + quiet_name + "=1000:200"},
                           dir, "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("mcp-agent: ready: "), std::chrono::seconds(30))) << agent.err();
  const pid_t a = spawn_in_cgroup(noisy, {kWorkload, "rate", "20000", "3"});
  const pid_t b = spawn_in_cgroup(quiet, {kWorkload, "rate", "200", "3"});
  ASSERT_EQ(mcp::test::wait_exit(a), 0) << "noisy workload failed";
  ASSERT_EQ(mcp::test::wait_exit(b), 0) << "quiet workload failed";
  agent.signal(SIGINT);
  ASSERT_EQ(agent.wait(std::chrono::seconds(30)), 0) << agent.err();
  const std::string err = agent.err();

  // TENANT  BUCKET  SEEN  KEPT  QUOTA_DROP
  auto row = [&](const std::string& name) {
    std::smatch m;
    const std::regex re(name + R"(\s+\d+\s+(\d+)\s+(\d+)\s+(\d+))");
    EXPECT_TRUE(std::regex_search(err, m, re)) << err;
    return std::array<uint64_t, 3>{std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3])};
  };
  const auto n = row(base + "/noisy"), q = row(base + "/" + quiet_name);
  EXPECT_GT(n[0], 20000u);  // it offered far more than its quota
  EXPECT_EQ(n[0], n[1] + n[2]);
  EXPECT_GT(n[2], 0u);
  EXPECT_GT(q[0], 400u);
  EXPECT_EQ(q[1], q[0]) << err;  // the quiet tenant keeps everything
  EXPECT_EQ(q[2], 0u);

  // The noisy tenant's kept rate over its own active span stays at the quota.
  const auto w = mcp::test::quota_window(parse_json_lines(mcp::test::slurp(events)), {id_of(noisy)});
  fs::remove_all(dir);
  EXPECT_EQ(w.count, n[1]);
  mcp::test::expect_within_quota(w, kQuota, kBurst);
}

// Tenants are subtrees: a quota on a QoS slice holds every pod below it, together. Two
// "pods" in the kubelet's systemd layout, each far above the quota, share it.
TEST(TenantQuota, QuotaOnAQosSliceHoldsTheProcessesOfItsPodsTogether) {
  MCP_REQUIRE_BPF();
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-qos-");
  const std::string slice = "kubepods.slice/kubepods-burstable.slice";
  const fs::path a = tree->add(slice + "/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/cri-containerd-" +
                               std::string(64, 'a') + ".scope");
  const fs::path b = tree->add(slice + "/kubepods-burstable-pod2c5f39cb_3fb2_22e3_994f_1127e4ddb538.slice/crio-" +
                               std::string(64, 'b') + ".scope");
  const std::string tenant = tree->relative_root() + "/" + slice;
  constexpr double kQuota = 1000, kBurst = 200;
  const fs::path dir = fs::temp_directory_path() / ("mcp-k8s-qos-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string events = (dir / "events.json").string();
  mcp::test::Process agent({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--output", events,
                            "--tenant-quota", tenant + "=1000:200"},
                           dir, "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("mcp-agent: ready: "), std::chrono::seconds(30))) << agent.err();
  const pid_t pa = spawn_in_cgroup(a, {kWorkload, "rate", "10000", "3"});
  const pid_t pb = spawn_in_cgroup(b, {kWorkload, "rate", "10000", "3"});
  ASSERT_EQ(mcp::test::wait_exit(pa), 0);
  ASSERT_EQ(mcp::test::wait_exit(pb), 0);
  agent.signal(SIGINT);
  ASSERT_EQ(agent.wait(std::chrono::seconds(30)), 0) << agent.err();
  const std::string err = agent.err();

  // TENANT  BUCKET  SEEN  KEPT  QUOTA_DROP: the slice's row counts both pods' calls.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(tenant + R"(\s+\d+\s+(\d+)\s+(\d+)\s+(\d+))"))) << err;
  const uint64_t seen = std::stoull(m[1]), kept = std::stoull(m[2]), dropped = std::stoull(m[3]);
  EXPECT_GT(seen, 40000u) << "both pods' calls (2 x 10000/s for 3 s) are the slice's";
  EXPECT_EQ(seen, kept + dropped);

  const auto id_a = mcp::cgroup::resolve_cgroup_id(a.string(), tree->mount());
  const auto id_b = mcp::cgroup::resolve_cgroup_id(b.string(), tree->mount());
  auto w = mcp::test::quota_window(parse_json_lines(mcp::test::slurp(events)), {id_a, id_b});
  fs::remove_all(dir);
  EXPECT_EQ(w.count, kept);
  EXPECT_GT(w.per_cgroup[id_a], 0u);
  EXPECT_GT(w.per_cgroup[id_b], 0u);
  mcp::test::expect_within_quota(w, kQuota, kBurst);  // one quota for the two pods together
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(ConsistentSampling, EveryHopKeepsTheSameTracesAsTheReferenceDecision) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 20000;
  constexpr double kRate = 0.25;
  // Three traced runs of the same request stream stand for three hops at the same rate.
  std::set<uint64_t> kept;
  std::map<uint64_t, int> hops;
  std::vector<nlohmann::json> events;
  for (int hop = 0; hop < 3; hop++) {
    auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_handle", "--sample-rate", "0.25",
                          "--trace-id-arg", "0:hex32", "--", kWorkload, "traceid", std::to_string(kCalls), "99"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (auto& e : parse_json_lines(r.out)) {
      kept.insert(e["args"][1].get<uint64_t>());
      hops[e["args"][1].get<uint64_t>()]++;
      events.push_back(std::move(e));
    }
  }
  // Reference: the same ids, the same threshold, the userspace decision.
  const uint64_t threshold = mcp::probability_to_threshold(kRate);
  std::set<uint64_t> expected;
  uint64_t seed = 99;
  char id[33];
  for (uint64_t i = 0; i < kCalls; i++) {
    const uint64_t hi = splitmix(seed), lo = splitmix(seed);
    snprintf(id, sizeof(id), "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
    auto r56 = mcp::control::trace_randomness56_hex(id);
    ASSERT_TRUE(r56.has_value());
    if (mcp::control::consistent_keep(*r56, threshold)) expected.insert(i);
  }
  EXPECT_EQ(kept, expected);
  for (const auto& [call, n] : hops) EXPECT_EQ(n, 3) << "call " << call << " kept by only some hops";
  const double sigma = std::sqrt(kCalls * kRate * (1 - kRate));
  EXPECT_NEAR(static_cast<double>(expected.size()), kCalls * kRate, 5 * sigma);
  for (const auto& e : events) {
    EXPECT_NEAR(e["weight"].get<double>(), 4.0, 1e-6);
  }
}


// Issue 31: trace-id prefix rules decided in the kernel. Ids under a rule's prefix are kept by
// OpenTelemetry's formula at that rule's threshold (the longest prefix holding the id decides),
// every other id at the probe's; each event carries the weight of the threshold that kept it,
// and the summary counts each rule's calls exactly.
TEST(ConsistentSampling, TraceIdPrefixRulesDecideWithTheLongestMatchingPrefixsThreshold) {
  MCP_REQUIRE_BPF();
  constexpr int kCalls = 20000;
  struct Rule {
    const char* prefix;
    double rate;
  };
  const std::vector<Rule> rules = {{"a", 1.0}, {"3", 0.05}, {"3c", 1.0}};
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_handle", "--sample-rate", "0.25",
                        "--trace-id-arg", "0:hex32", "--trace-id-prefix", "a=1", "--trace-id-prefix", "3=0.05",
                        "--trace-id-prefix", "3C=1", "--", kWorkload, "traceid", std::to_string(kCalls), "99"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<uint64_t, double> kept;  // call index -> weight
  for (const auto& e : parse_json_lines(r.out)) kept[e["args"][1].get<uint64_t>()] = e["weight"].get<double>();

  std::map<uint64_t, double> expected;
  std::map<std::string, uint64_t> seen;  // per rule, as the kernel counts it
  uint64_t seed = 99;
  char id[33];
  for (uint64_t i = 0; i < kCalls; i++) {
    const uint64_t hi = splitmix(seed), lo = splitmix(seed);
    snprintf(id, sizeof(id), "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
    double rate = 0.25;
    std::string decided;
    for (const auto& rule : rules)
      if (std::string(id).rfind(rule.prefix, 0) == 0 && std::string(rule.prefix).size() > decided.size()) {
        decided = rule.prefix;
        rate = rule.rate;
      }
    if (!decided.empty()) seen[decided]++;
    const auto r56 = mcp::control::trace_randomness56_hex(id);
    ASSERT_TRUE(r56.has_value());
    if (mcp::control::consistent_keep(*r56, mcp::probability_to_threshold(rate))) expected[i] = 1 / rate;
  }
  ASSERT_EQ(kept.size(), expected.size());
  for (const auto& [call, weight] : expected) {
    ASSERT_TRUE(kept.count(call)) << "call " << call << " should have been kept";
    EXPECT_NEAR(kept[call], weight, 1e-9 * weight) << "call " << call;
  }
  // Enough ids under each rule for the comparison to mean something (1/16, 15/256, 1/256 of them).
  EXPECT_GT(seen["a"], 1000u);
  EXPECT_GT(seen["3"], 1000u);
  EXPECT_GT(seen["3c"], 40u);
  for (const auto& rule : rules) {
    const std::regex row(std::string(rule.prefix) + "… \\(.*mcp_handle\\) +[0-9.e-]+ +([0-9]+) +([0-9]+)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, row)) << rule.prefix << " has no summary row:\n" << r.err;
    EXPECT_EQ(std::stoull(m[1]), seen[rule.prefix]) << rule.prefix;
  }
}

}  // namespace
