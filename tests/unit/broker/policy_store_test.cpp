#include "broker/policy/policy_store.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "clock/clock_source.h"
#include "common/error.h"
#include "common/trace_id_prefix.h"

namespace mcp::broker {
namespace {

TEST(PolicyStore, LatestPolicyPerServiceAndProbeSurvivesARestart) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-policies-" + std::to_string(std::random_device{}()) + ".json");
  {
    PolicyStore store(file);
    mcp::v1::Policy p;
    p.set_service("api");
    p.set_probe("syscall:read");
    p.set_sampling_rate(0.5);
    store.apply(p);
    p.set_sampling_rate(0.25);
    store.apply(p);
    p.set_service("db");
    p.set_sampling_rate(0);
    p.set_target_qps(100);
    store.apply(p);
  }
  PolicyStore reloaded(file);
  const auto list = reloaded.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].service(), "api");
  EXPECT_DOUBLE_EQ(list[0].sampling_rate(), 0.25);
  EXPECT_GT(list[0].updated_unix_ns(), 0u);
  EXPECT_DOUBLE_EQ(list[1].target_qps(), 100);
  std::filesystem::remove(file);
}

TEST(PolicyStore, ConditionsSurviveARestartAndRemoveIsPersisted) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-policies-" + std::to_string(std::random_device{}()) + ".json");
  {
    PolicyStore store(file);
    mcp::v1::Policy p;
    p.set_service("cart");
    p.set_sampling_rate(0.1);
    (*p.mutable_service_labels())["version"] = "v2";
    p.set_trace_id_prefix("00ab");
    p.set_source("SamplingPolicy shop/cart");
    store.apply(p);
    p.set_service("gone");
    store.apply(p);
    EXPECT_FALSE(store.remove({"gone", ""})) << "the key includes the prefix";
    EXPECT_TRUE(store.remove({"gone", "", "00ab"}));
    EXPECT_FALSE(store.remove({"gone", "", "00ab"}));
  }
  PolicyStore reloaded(file);
  const auto list = reloaded.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].service(), "cart");
  EXPECT_EQ(list[0].service_labels().at("version"), "v2");
  EXPECT_EQ(list[0].trace_id_prefix(), "00ab");
  EXPECT_EQ(list[0].source(), "SamplingPolicy shop/cart");
  std::filesystem::remove(file);
}

TEST(PolicyStore, RejectsATraceIdPrefixThatIsNotLowercaseHexOfAtMost32Digits) {
  mcp::v1::Policy p;
  p.set_sampling_rate(1);
  for (const char* bad : {"00AB", "xyz", "0123456789abcdef0123456789abcdef0"}) {
    p.set_trace_id_prefix(bad);
    EXPECT_THROW(validate_policy(p), Error) << bad;
  }
  p.set_trace_id_prefix("0123456789abcdef0123456789abcdef");
  EXPECT_NO_THROW(validate_policy(p));
}

// A prefix rule is a policy of its own beside the one of its (service, probe): storing one
// replaces neither, and the removal names the prefix.
TEST(PolicyStore, APrefixRuleAndThePlainPolicyOfItsProbeAreTwoPolicies) {
  PolicyStore store;
  mcp::v1::Policy p;
  p.set_service("checkout");
  p.set_sampling_rate(0.01);
  store.apply(p);
  p.set_trace_id_prefix("00af");
  p.set_sampling_rate(1);
  store.apply(p);
  p.set_sampling_rate(0.5);
  store.apply(p);  // same key: replaces the rule
  const auto list = store.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].trace_id_prefix(), "");
  EXPECT_EQ(list[0].sampling_rate(), 0.01);
  EXPECT_EQ(list[1].trace_id_prefix(), "00af");
  EXPECT_EQ(list[1].sampling_rate(), 0.5);
  EXPECT_EQ(removal_of(key_of(list[1])).trace_id_prefix(), "00af");
  EXPECT_TRUE(store.remove({"checkout", "", "00af"}));
  ASSERT_EQ(store.list().size(), 1u);
}

// Agents tell a removal from a policy by its missing rate and target: no stored policy may
// look like one.
TEST(PolicyStore, ARemovalIsNeverAValidPolicy) {
  const mcp::v1::Policy r = removal_of({"checkout", "syscall:read"});
  EXPECT_EQ(r.service(), "checkout");
  EXPECT_EQ(r.probe(), "syscall:read");
  EXPECT_EQ(r.sampling_rate(), 0);
  EXPECT_EQ(r.target_qps(), 0);
  EXPECT_THROW(validate_policy(r), Error);
  EXPECT_THROW(PolicyStore().apply(r), Error);
}

TEST(PolicyStore, RejectsARateOutsideZeroToOne) {
  PolicyStore store;
  mcp::v1::Policy p;
  p.set_sampling_rate(1.5);
  EXPECT_THROW(store.apply(p), Error);
  p.set_sampling_rate(0);
  EXPECT_THROW(store.apply(p), Error);  // neither rate nor qps
  EXPECT_TRUE(store.list().empty());
}

TEST(PolicyStore, RejectsNonFiniteTinyAndHugeNumbers) {
  PolicyStore store;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [rate, qps] : std::vector<std::pair<double, double>>{
           {nan, 0}, {0, nan}, {inf, 0}, {0, inf}, {-inf, 0}, {5e-324, 0}, {kMinSamplingRate / 2, 0},
           {0, kMaxTargetQps * 2}, {0, kMinTargetQps / 2}, {0, -1}, {0.5, nan}}) {
    mcp::v1::Policy p;
    p.set_sampling_rate(rate);
    p.set_target_qps(qps);
    EXPECT_THROW(store.apply(p), Error) << "rate " << rate << " qps " << qps;
  }
  EXPECT_TRUE(store.list().empty());
  mcp::v1::Policy edge;
  edge.set_sampling_rate(kMinSamplingRate);
  EXPECT_NO_THROW(store.apply(edge));
  edge.set_sampling_rate(0);
  edge.set_target_qps(kMaxTargetQps);
  EXPECT_NO_THROW(store.apply(edge));
}

// Issue 29: a policy naming both a rate and a target QPS was stored, and what the agent then
// did with it depended on which it looked at first. One or the other.
TEST(PolicyStore, APolicyWithBothARateAndATargetQpsIsRefused) {
  PolicyStore store;
  mcp::v1::Policy p;
  p.set_service("checkout");
  p.set_sampling_rate(0.1);
  p.set_target_qps(100);
  try {
    store.apply(p);
    ADD_FAILURE() << "stored a policy with both";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a policy takes sampling_rate or target_qps, not both");
  }
  EXPECT_TRUE(store.list().empty());
}

TEST(PolicyStore, ABadStoredRecordIsQuarantinedNotFatal) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mcp-policies-q-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "policies.json";
  std::ofstream(file) << R"([{"service":"nan","sampling_rate":null},)"
                      << R"({"service":"tiny","sampling_rate":5e-324},)"
                      << R"({"service":"ok","sampling_rate":0.5}])";
  {
    PolicyStore store(file);
    ASSERT_EQ(store.list().size(), 1u);
    EXPECT_EQ(store.list()[0].service(), "ok");
  }
  std::ifstream q(dir / "policies.json.quarantine");
  std::stringstream text;
  text << q.rdbuf();
  EXPECT_NE(text.str().find("nan"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("tiny"), std::string::npos) << text.str();
  EXPECT_EQ(PolicyStore(file).list().size(), 1u);  // rewritten: the next start is clean

  std::ofstream(file) << "[{ broken";
  EXPECT_TRUE(PolicyStore(file).list().empty());
  EXPECT_FALSE(std::filesystem::exists(file)) << "the unreadable file was not moved aside";
  std::filesystem::remove_all(dir);
}

// Issue 51: the broker stored 306 prefix rules for one probe while the agent holds 255 and
// dropped the rest with a log line. The one past the agent's table is refused, naming why.
TEST(PolicyStore, RefusesAPrefixRulePastWhatAnAgentHolds) {
  PolicyStore store;
  mcp::v1::Policy p;
  p.set_service("api");
  p.set_probe("handle");
  p.set_sampling_rate(0.5);
  auto hex = [](size_t i) {
    char text[8];
    std::snprintf(text, sizeof text, "%04zx", i);
    return std::string(text);
  };
  for (size_t i = 0; i < kMaxTraceIdPrefixRules; i++) {
    p.set_trace_id_prefix(hex(i));
    store.apply(p);
  }
  ASSERT_EQ(kMaxTraceIdPrefixRules, 255u);
  p.set_trace_id_prefix(hex(kMaxTraceIdPrefixRules));
  try {
    store.apply(p);
    ADD_FAILURE() << "rule 256 was stored";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);  // the broker answers INVALID_ARGUMENT
    EXPECT_EQ(std::string(e.what()),
              "service 'api' probe 'handle' has 255 trace_id_prefix rules already, the most an agent holds: "
              "remove one first");
  }
  EXPECT_EQ(store.list().size(), kMaxTraceIdPrefixRules);
  // What takes no more room still goes: a replaced rule, a plain policy, another probe's rule.
  p.set_trace_id_prefix(hex(7));
  p.set_sampling_rate(0.25);
  EXPECT_DOUBLE_EQ(store.apply(p).sampling_rate(), 0.25);
  p.set_trace_id_prefix("");
  store.apply(p);
  p.set_probe("other");
  p.set_trace_id_prefix("ff");
  store.apply(p);
  EXPECT_EQ(store.list().size(), kMaxTraceIdPrefixRules + 2);
  // Room made by a removal is room again.
  ASSERT_TRUE(store.remove({"api", "handle", hex(0)}));
  p.set_probe("handle");
  p.set_trace_id_prefix(hex(kMaxTraceIdPrefixRules));
  store.apply(p);
}

// updated_unix_ns is the realtime of the store's clock (BrokerOptions::clock), not the host's.
TEST(PolicyStore, StampsAPolicyWithItsClocksWallTime) {
  auto sim_clock = std::make_shared<clock::SimulatedClockSource>(clock::SimulatedClockOptions{.read_cost_ns = 0});
  PolicyStore store({}, sim_clock);
  mcp::v1::Policy p;
  p.set_service("checkout");
  p.set_probe("handle_request");
  p.set_sampling_rate(0.25);
  EXPECT_EQ(store.apply(p).updated_unix_ns(), uint64_t{1'700'000'000'000'000'000});
  sim_clock->advance(int64_t{7'000'000'000});
  EXPECT_EQ(store.apply(p).updated_unix_ns(), uint64_t{1'700'000'007'000'000'000});
  EXPECT_EQ(store.list().at(0).updated_unix_ns(), uint64_t{1'700'000'007'000'000'000});
}

}  // namespace
}  // namespace mcp::broker
