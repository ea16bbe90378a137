// The control loop against FakeKernelMaps: what it writes into the kernel's
// threshold and quota maps, driven by tick() with synthetic times (no thread, no clock).
#include "runtime/control_loop.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "../../support/files.h"
#include "fake_kernel_maps.h"

namespace mcp::runtime {
namespace {

using test::FakeKernelMaps;
constexpr uint64_t kTickNs = 100'000'000;

TEST(ControlLoop, SteersAProbeOfferedTenTimesItsTargetToAboutOneTenth) {
  FakeKernelMaps maps;
  const uint32_t id = maps.add("syscall:getppid");
  ControlSettings s;
  s.target_qps = 100;
  ControlLoop loop(maps, s);
  uint64_t now = kTickNs;
  for (int i = 0; i < 300; i++, now += kTickNs) {  // 30 s at 1000 calls/s
    maps.advance(100);
    loop.tick(now);
  }
  const double p = threshold_to_probability(maps.threshold(id));
  EXPECT_GT(p, 0.07);
  EXPECT_LT(p, 0.14);
  ASSERT_EQ(loop.rate_stats().size(), 1u);
  EXPECT_NEAR(loop.rate_stats()[0].kept_qps, 100, 30);
}

TEST(ControlLoop, WithoutATargetProbesKeepTheirFixedRate) {
  FakeKernelMaps maps;
  const uint32_t id = maps.add("syscall:getppid");
  maps.set_threshold(id, probability_to_threshold(0.5));
  ControlLoop loop(maps, ControlSettings{});
  for (uint64_t now = kTickNs; now < 50 * kTickNs; now += kTickNs) {
    maps.advance(1000);
    loop.tick(now);
  }
  EXPECT_EQ(maps.threshold(id), probability_to_threshold(0.5));
}

TEST(ControlLoop, PolicyRateMatchesByNameOrSymbolAndSkipsInternalProbes) {
  FakeKernelMaps maps;
  const uint32_t a = maps.add("/bin/x:handle", false, "handle");
  const uint32_t b = maps.add("syscall:read");
  const uint32_t internal = maps.add("/lib/libcudart.so:__cudaGetKernel", true, "__cudaGetKernel");
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  EXPECT_EQ(loop.apply_policy("handle", 0.25, 0), 1);
  EXPECT_EQ(maps.threshold(a), probability_to_threshold(0.25));
  EXPECT_EQ(maps.threshold(b), UINT64_MAX);
  EXPECT_EQ(loop.apply_policy("", 0.5, 0), 2);  // every probe but the bookkeeping one
  EXPECT_EQ(maps.threshold(b), probability_to_threshold(0.5));
  EXPECT_EQ(maps.threshold(internal), UINT64_MAX);
  EXPECT_EQ(loop.apply_policy("nope", 0.5, 0), 0);
}

TEST(ControlLoop, PolicyTargetHandsAFixedProbeToTheController) {
  FakeKernelMaps maps;
  const uint32_t id = maps.add("syscall:getppid");
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  ASSERT_EQ(loop.apply_policy("syscall:getppid", 0, 50), 1);
  uint64_t now = kTickNs;
  for (int i = 0; i < 300; i++, now += kTickNs) {
    maps.advance(100);
    loop.tick(now);
  }
  EXPECT_LT(threshold_to_probability(maps.threshold(id)), 0.1);
  loop.set_fixed_rate(id, 1.0);  // the config takes it back
  EXPECT_EQ(maps.threshold(id), UINT64_MAX);
  maps.advance(100);
  loop.tick(now);
  EXPECT_EQ(maps.threshold(id), UINT64_MAX);
}

// `trace --config`: the file's probes with a target_qps are steered, one with a fixed rate
// and the flag probes keep theirs, with neither a global target nor broker policies.
TEST(ControlLoop, ProbeTargetsSteerOnlyTheProbesGivenATarget) {
  for (const bool probe_targets : {false, true}) {
    FakeKernelMaps maps;
    const uint32_t steered = maps.add("syscall:getppid");
    const uint32_t fixed = maps.add("syscall:read");
    ControlSettings s;
    s.probe_targets = probe_targets;
    ControlLoop loop(maps, s);
    loop.set_target(steered, 50);
    loop.set_fixed_rate(fixed, 0.5);
    uint64_t now = kTickNs;
    for (int i = 0; i < 300; i++, now += kTickNs) {
      maps.advance(100);
      loop.tick(now);
    }
    if (probe_targets) EXPECT_LT(threshold_to_probability(maps.threshold(steered)), 0.1);
    else EXPECT_EQ(maps.threshold(steered), UINT64_MAX) << "no controller: set_target is a no-op";
    EXPECT_EQ(maps.threshold(fixed), probability_to_threshold(0.5));
  }
}

TEST(ControlLoop, QuotasAreWrittenAndRemovedBucketsBecomeUnlimited) {
  FakeKernelMaps maps;
  maps.add("syscall:getppid");
  ControlLoop loop(maps, ControlSettings{});
  control::TenantQuotaTable table;
  table.buckets.fill({0.0, 0});  // burst 0: unlimited
  table.buckets[3] = {500.0, 20};
  table.configured[3] = true;
  loop.set_quotas(table);
  ASSERT_EQ(maps.quota_writes.size(), 1u);
  EXPECT_EQ(maps.quota_writes[0].bucket, 3u);
  EXPECT_EQ(maps.quota_writes[0].rate, 500.0);
  EXPECT_EQ(maps.quota_writes[0].burst, 20u);
  maps.quota_writes.clear();
  loop.set_quotas(std::nullopt);
  ASSERT_EQ(maps.quota_writes.size(), 1u);
  EXPECT_EQ(maps.quota_writes[0].bucket, 3u);
  EXPECT_EQ(maps.quota_writes[0].burst, 0u);
}

// Tenants are subtrees: each configured cgroup goes to the kernel with its tenant id (the
// kernel picks the deepest one a task is under).
TEST(ControlLoop, TenantCgroupsGoToTheKernelWithTheirTenantIds) {
  FakeKernelMaps maps;
  maps.add("syscall:getppid");
  ControlLoop loop(maps, ControlSettings{});
  control::TenantQuotaTable table;
  table.tenants = {{"/kubepods.slice", 10, 1, {100.0, 1}, 1, 10},
                   {"/kubepods.slice/kubepods-burstable.slice", 20, 3, {100.0, 1}, 2, 20}};
  loop.set_quotas(table);
  EXPECT_EQ(maps.tenants(), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 10}, {20, 20}}));
  loop.set_quotas(std::nullopt);
  EXPECT_TRUE(maps.tenants().empty());
}

// Removing a policy gives each probe back what it had: the latest remaining policy that
// matches it, else its own fixed threshold.
TEST(ControlLoop, RemovedPolicyReturnsProbesToTheEarlierPolicyThenToTheirOwnRate) {
  FakeKernelMaps maps;
  const uint32_t a = maps.add("/bin/x:handle", false, "handle");
  const uint32_t b = maps.add("syscall:read");
  maps.set_threshold(b, probability_to_threshold(0.5));
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"svc", "", 0.25, 0, nullptr}), 2);
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"svc", "handle", 0.1, 0, nullptr}), 1);
  EXPECT_EQ(maps.threshold(a), probability_to_threshold(0.1));
  EXPECT_EQ(loop.remove_policy("other", "handle"), 0) << "not a key it holds";
  EXPECT_EQ(loop.remove_policy("svc", "handle"), 1);
  EXPECT_EQ(maps.threshold(a), probability_to_threshold(0.25)) << "the earlier policy matching it";
  EXPECT_EQ(maps.threshold(b), probability_to_threshold(0.25));
  EXPECT_EQ(loop.remove_policy("svc", ""), 2);
  EXPECT_EQ(maps.threshold(a), UINT64_MAX);
  EXPECT_EQ(maps.threshold(b), probability_to_threshold(0.5));
  EXPECT_EQ(loop.remove_policy("svc", ""), 0) << "removed twice";
}

// A removal under a later, overlapping policy changes nothing; a pushed policy replaces the
// earlier one of its key; a probe the config took back stays the config's.
TEST(ControlLoop, RemovalLeavesProbesALaterPolicyOrTheConfigHolds) {
  FakeKernelMaps maps;
  const uint32_t a = maps.add("/bin/x:handle", false, "handle");
  const uint32_t b = maps.add("syscall:read");
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  loop.apply_policy(ProbePolicy{"svc", "handle", 0.1, 0, nullptr});
  loop.apply_policy(ProbePolicy{"svc", "", 0.25, 0, nullptr});
  loop.apply_policy(ProbePolicy{"svc", "", 0.2, 0, nullptr});  // same key: replaces 0.25
  EXPECT_EQ(loop.remove_policy("svc", "handle"), 0);
  EXPECT_EQ(maps.threshold(a), probability_to_threshold(0.2));
  loop.set_fixed_rate(b, 0.75);
  EXPECT_EQ(loop.remove_policy("svc", ""), 1);
  EXPECT_EQ(maps.threshold(a), UINT64_MAX);
  EXPECT_EQ(maps.threshold(b), probability_to_threshold(0.75));
}

// A probe the controller steered to its own target goes back to that target, not to the
// threshold it happened to have when the policy came.
TEST(ControlLoop, RemovedPolicyHandsASteeredProbeBackToItsOwnTarget) {
  FakeKernelMaps maps;
  const uint32_t id = maps.add("syscall:getppid");
  ControlSettings s;
  s.target_qps = 100;
  ControlLoop loop(maps, s);
  uint64_t now = kTickNs;
  const auto run = [&](int ticks) {
    for (int i = 0; i < ticks; i++, now += kTickNs) {
      maps.advance(100);  // 1000 calls/s
      loop.tick(now);
    }
  };
  run(100);
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"", "", 1.0, 0, nullptr}), 1);
  run(50);
  EXPECT_EQ(maps.threshold(id), UINT64_MAX) << "a fixed policy rate is not steered";
  ASSERT_EQ(loop.remove_policy("", ""), 1);
  run(300);
  const double p = threshold_to_probability(maps.threshold(id));
  EXPECT_GT(p, 0.07);
  EXPECT_LT(p, 0.14);
}

// A prefix rule sets the rate of the trace ids under its prefix on the probes that decide on a
// trace id, leaves their own rate alone, is refused (and named) by the others, and on removal
// gives the probe back to an earlier rule of the same prefix, then to the probe's own rate.
TEST(ControlLoop, PrefixRulesGoToTraceIdProbesOnlyAndComeOffInOrder) {
  FakeKernelMaps maps;
  const uint32_t traced = maps.add("/bin/x:handle", false, "handle");
  const uint32_t plain = maps.add("syscall:read");
  maps.set_trace_id(traced);
  maps.set_threshold(traced, probability_to_threshold(0.01));
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"svc", "", 1.0, 0, nullptr, "00af"}), 1);
  ASSERT_EQ(maps.prefixes.size(), 1u);
  const auto [slot, threshold] = maps.prefixes.at({traced, "00af"});
  EXPECT_GE(slot, 1u);
  EXPECT_EQ(threshold, UINT64_MAX);
  EXPECT_EQ(maps.threshold(traced), probability_to_threshold(0.01)) << "the probe's own rate is untouched";
  EXPECT_EQ(maps.threshold(plain), UINT64_MAX);
  const auto lines = loop.policy_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("trace_id_prefix=00af"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("rejected_by=syscall:read (no trace-id argument)"), std::string::npos) << lines[0];

  // A longer prefix is its own rule; the longest holding an id is the one that decided it.
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"svc", "handle", 0.5, 0, nullptr, "00afc"}), 1);
  EXPECT_EQ(loop.prefix_rule_of(traced, 0x00afc00000000000ull, 7), "00afc");
  EXPECT_EQ(loop.prefix_rule_of(traced, 0x00af100000000000ull, 7), "00af");
  EXPECT_EQ(loop.prefix_rule_of(traced, 0x00ae100000000000ull, 7), "");
  EXPECT_EQ(loop.prefix_rule_of(plain, 0x00afc00000000000ull, 7), "");

  // A second rule for the same prefix takes the probe; removing it gives it back to the first.
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"other", "handle", 0.25, 0, nullptr, "00af"}), 1);
  EXPECT_EQ(maps.prefixes.at({traced, "00af"}).second, probability_to_threshold(0.25));
  EXPECT_EQ(loop.remove_policy("other", "handle", "00af"), 1);
  EXPECT_EQ(maps.prefixes.at({traced, "00af"}).second, UINT64_MAX);
  EXPECT_EQ(loop.remove_policy("svc", "", "00af"), 1);
  EXPECT_EQ(maps.prefixes.count({traced, "00af"}), 0u);
  EXPECT_EQ(maps.prefixes.count({traced, "00afc"}), 1u);
  EXPECT_EQ(loop.remove_policy("svc", "handle", ""), 0) << "the key includes the prefix";
  const auto keys = loop.policy_keys();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(std::get<2>(keys[0]), "00afc");
  loop.forget(traced);  // the probe detached: its rules are gone from the kernel
  EXPECT_TRUE(maps.prefixes.empty());
}

// A prefix rule with a target QPS is steered on the prefix's own counters.
TEST(ControlLoop, PrefixTargetSteersTheIdsUnderThePrefix) {
  FakeKernelMaps maps;
  const uint32_t id = maps.add("/bin/x:handle", false, "handle");
  maps.set_trace_id(id);
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  ASSERT_EQ(loop.apply_policy(ProbePolicy{"", "", 0, 50, nullptr, "a"}), 1);
  const uint32_t slot = maps.prefixes.at({id, "a"}).first;
  double kept = 0;
  uint64_t now = kTickNs;
  for (int i = 0; i < 300; i++, now += kTickNs) {  // 1000 calls/s under the prefix
    const double p = threshold_to_probability(maps.prefixes.at({id, "a"}).second);
    maps.prefix_counts[slot].seen += 100;
    kept += 100 * p;
    maps.prefix_counts[slot].kept = static_cast<uint64_t>(kept);
    loop.tick(now);
  }
  const double p = threshold_to_probability(maps.prefixes.at({id, "a"}).second);
  EXPECT_GT(p, 0.035);
  EXPECT_LT(p, 0.07);
  EXPECT_EQ(maps.threshold(id), UINT64_MAX) << "the probe's own rate is not steered";
  const auto rules = loop.prefix_rules();
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].target_qps, 50);
  EXPECT_EQ(rules[0].counters.seen, 30000u);
}

// `matches` decides which probes a policy takes (the runtime matches services and labels).
TEST(ControlLoop, PolicyMatcherPicksTheProbes) {
  FakeKernelMaps maps;
  const uint32_t a = maps.add("/bin/x:handle", false, "handle");
  const uint32_t b = maps.add("syscall:read");
  ControlSettings s;
  s.accept_policies = true;
  ControlLoop loop(maps, s);
  EXPECT_EQ(loop.apply_policy(ProbePolicy{"svc", "", 0.5, 0, [&](const loader::ProbeInfo& p) { return p.id == b; }}),
            1);
  EXPECT_EQ(maps.threshold(a), UINT64_MAX);
  EXPECT_EQ(maps.threshold(b), probability_to_threshold(0.5));
}

std::string pod_dir(const std::string& uid) {
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  return "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice";
}

uint64_t inode(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Pod and namespace tenants and selectors: every pod of the namespace maps to the one tenant
// id, a pod named on its own wins over its namespace, a pod listed later is covered at the
// next tick, a deleted one leaves the kernel's map, and a selector follows its pod; a
// container probe's cgroups share the table and the ticks leave them be.
TEST(ControlLoop, PodAndNamespaceTenantsAndSelectorsFollowThePodWatch) {
  mcp::test::TempDir root("mcp-ctl-pods");
  const std::string u1 = "1b4e28ba-2fa1-11d2-883f-0016d3cca427", u2 = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538",
                    u3 = "3d6a4adc-4ac3-33f4-a55f-2238f5eec649", u4 = "4e7b5bed-5bd4-44a5-b66a-3349a6ffd75a";
  for (const auto& u : {u1, u2, u3, u4}) std::filesystem::create_directories(root.path() / pod_dir(u));
  const auto cg = [&](const std::string& u) { return inode(root.path() / pod_dir(u)); };
  auto dir = std::make_shared<k8s::PodDirectory>();
  dir->replace({{u1, "p1", "team-a", {}, {}}, {u2, "p2", "team-a", {}, {}}, {u3, "q1", "team-b", {}, {}}});

  FakeKernelMaps maps;
  const uint32_t probe = maps.add("syscall:getppid");
  ControlLoop loop(maps, ControlSettings{});
  const k8s::PodRef ns{"team-a", ""}, p2{"team-a", "p2"};
  control::TenantQuotaTable table;
  table.tenants = {{ns.text(), 0, 0, {100.0, 1}, 0, control::pod_ref_tenant_id(ns), ns},
                   {p2.text(), 0, 0, {100.0, 1}, 0, control::pod_ref_tenant_id(p2), p2}};
  loop.set_quotas(table);
  loop.set_selector(probe, k8s::PodRef{"team-a", "p1"});
  // A container probe's containers, in the same table (ContainerProbe hands them over).
  const uint32_t in_containers = maps.add("/usr/local/bin/app:work");
  loop.set_scope(in_containers, {777, 778});
  EXPECT_EQ(maps.scope_of(in_containers), (std::vector<uint64_t>{777, 778}));
  EXPECT_TRUE(maps.tenants().empty()) << "no pod watch yet";
  EXPECT_TRUE(maps.scope_of(probe).empty());
  loop.set_pod_cgroups(std::make_unique<k8s::PodCgroups>(dir, root.path()));
  using Pairs = std::vector<std::pair<uint64_t, uint64_t>>;
  const auto expect = [&](Pairs want) {
    std::sort(want.begin(), want.end());
    return want;
  };
  EXPECT_EQ(maps.tenants(), expect({{cg(u1), control::pod_ref_tenant_id(ns)}, {cg(u2), control::pod_ref_tenant_id(p2)}}));
  EXPECT_EQ(maps.scope_of(probe), std::vector<uint64_t>{cg(u1)});

  dir->upsert({u4, "p3", "team-a", {}, {}});
  loop.tick(kTickNs);
  EXPECT_EQ(maps.tenants(), expect({{cg(u1), control::pod_ref_tenant_id(ns)},
                                         {cg(u2), control::pod_ref_tenant_id(p2)},
                                         {cg(u4), control::pod_ref_tenant_id(ns)}}));
  dir->erase(u1);
  loop.tick(2 * kTickNs);
  EXPECT_EQ(maps.tenants(), expect({{cg(u2), control::pod_ref_tenant_id(p2)}, {cg(u4), control::pod_ref_tenant_id(ns)}}));
  EXPECT_TRUE(maps.scope_of(probe).empty()) << "p1 is gone";
  EXPECT_EQ(maps.scope_of(in_containers), (std::vector<uint64_t>{777, 778})) << "the ticks' writes leave it alone";
  EXPECT_EQ(loop.scope(in_containers), (std::map<uint64_t, uint64_t>{{777, 1}, {778, 1}}));
  loop.set_scope(in_containers, {778});
  EXPECT_EQ(maps.scope_of(in_containers), std::vector<uint64_t>{778});
  loop.forget(in_containers);
  EXPECT_TRUE(maps.scope_of(in_containers).empty()) << "a forgotten probe's scope leaves the kernel";
  loop.forget(probe);
  dir->upsert({u1, "p1", "team-a", {}, {}});
  loop.tick(3 * kTickNs);
  EXPECT_TRUE(maps.scope_of(probe).empty()) << "a forgotten probe's selector is not written";
}

}  // namespace
}  // namespace mcp::runtime
