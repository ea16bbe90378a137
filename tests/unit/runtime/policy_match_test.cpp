// Which probes a broker policy applies to (runtime/policy_match.h).
#include "runtime/policy_match.h"

#include <gtest/gtest.h>

namespace mcp::runtime {
namespace {

loader::ProbeInfo probe(const std::string& name, const std::string& symbol = {}) {
  loader::ProbeInfo p;
  p.name = name;
  p.symbol = symbol;
  return p;
}

PolicyUpdate policy(const std::string& service, const std::string& probe_key = {}) {
  PolicyUpdate p;
  p.service = service;
  p.probe = probe_key;
  p.sampling_rate = 0.5;
  return p;
}

TEST(PolicyApplies, ServiceIsTheProbesOwnOrTheRunsWhenItHasNoLabels) {
  const ProbeMeta checkout{"checkout", {}, {}}, cart{"cart", {}, {}};
  const auto p = probe("/bin/x:handle", "handle");
  EXPECT_TRUE(policy_applies(policy("checkout"), p, &checkout, std::nullopt));
  EXPECT_FALSE(policy_applies(policy("checkout"), p, &cart, std::nullopt)) << "the daemon's probe of another service";
  EXPECT_FALSE(policy_applies(policy("checkout"), p, &cart, std::string("checkout"))) << "labels first";
  EXPECT_TRUE(policy_applies(policy(""), p, &cart, std::nullopt));
  EXPECT_TRUE(policy_applies(policy("checkout"), p, nullptr, std::string("checkout")));
  EXPECT_FALSE(policy_applies(policy("checkout"), p, nullptr, std::string("")));
  EXPECT_TRUE(policy_applies(policy("checkout"), p, nullptr, std::nullopt)) << "no service known at all";
}

TEST(PolicyApplies, ProbeByNameOrSymbol) {
  const ProbeMeta m{"s", {}, {}};
  EXPECT_TRUE(policy_applies(policy("s", "handle"), probe("/bin/x:handle", "handle"), &m, std::nullopt));
  EXPECT_TRUE(policy_applies(policy("s", "/bin/x:handle"), probe("/bin/x:handle", "handle"), &m, std::nullopt));
  EXPECT_FALSE(policy_applies(policy("s", "syscall:read"), probe("/bin/x:handle", "handle"), &m, std::nullopt));
}

// serviceLabels: every pair among the probe's tags, as an event of the probe carries them.
TEST(PolicyApplies, EveryServiceLabelMustBeAmongTheProbesTags) {
  const ProbeMeta m{"s", {{"zone", "a"}, {"version", "v2"}}, {}};
  auto p = policy("s");
  p.service_labels = {{"zone", "a"}};
  EXPECT_TRUE(policy_applies(p, probe("syscall:read"), &m, std::nullopt));
  p.service_labels = {{"zone", "a"}, {"version", "v2"}};
  EXPECT_TRUE(policy_applies(p, probe("syscall:read"), &m, std::nullopt));
  p.service_labels = {{"zone", "a"}, {"version", "v1"}};
  EXPECT_FALSE(policy_applies(p, probe("syscall:read"), &m, std::nullopt));
  p.service_labels = {{"tier", "web"}};
  EXPECT_FALSE(policy_applies(p, probe("syscall:read"), &m, std::nullopt));
  EXPECT_FALSE(policy_applies(p, probe("syscall:read"), nullptr, std::nullopt)) << "a probe without tags";
}

// A prefix narrows which calls of a probe the policy decides (the control loop's prefix rules),
// not which probes it selects: service and labels choose them as for any policy.
TEST(PolicyApplies, APolicyWithATraceIdPrefixSelectsProbesAsWithout) {
  const ProbeMeta m{"s", {}, {}};
  auto p = policy("s");
  p.trace_id_prefix = "00ab";
  EXPECT_TRUE(policy_applies(p, probe("syscall:read"), &m, std::nullopt));
  const ProbeMeta other{"t", {}, {}};
  EXPECT_FALSE(policy_applies(p, probe("syscall:read"), &other, std::nullopt));
}

}  // namespace
}  // namespace mcp::runtime
