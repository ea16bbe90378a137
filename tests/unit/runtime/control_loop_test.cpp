// The control loop against FakeKernelMaps: what it writes into the kernel's
// threshold and quota maps, driven by tick() with synthetic times (no thread, no clock).
#include "runtime/control_loop.h"

#include <gtest/gtest.h>

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

// Tenants are subtrees: the kernel takes the first configured cgroup a task is under, so a
// pod's quota inside its QoS slice's quota must come first, whatever the configuration order.
TEST(ControlLoop, TenantCgroupsGoToTheKernelMostSpecificFirst) {
  FakeKernelMaps maps;
  maps.add("syscall:getppid");
  ControlLoop loop(maps, ControlSettings{});
  control::TenantQuotaTable table;
  table.tenants = {{"/kubepods.slice", 10, 1, {100.0, 1}, 1},
                   {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podX.slice", 30, 2, {100.0, 1}, 3},
                   {"/kubepods.slice/kubepods-burstable.slice", 20, 3, {100.0, 1}, 2}};
  loop.set_quotas(table);
  EXPECT_EQ(maps.tenant_cgroups, (std::vector<uint64_t>{30, 20, 10}));
  loop.set_quotas(std::nullopt);
  EXPECT_TRUE(maps.tenant_cgroups.empty());
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

}  // namespace
}  // namespace mcp::runtime
