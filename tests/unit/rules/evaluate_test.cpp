#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include <gtest/gtest.h>

#include "rules/ruleset.h"

// Counts heap allocations made by this thread while `g_counting` is set, so tests can
// show that evaluation stays off the heap.
namespace {
thread_local bool g_counting = false;
thread_local size_t g_allocs = 0;
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting) ++g_allocs;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mcp::rules {
namespace {

Event sample_event() {
  Event e;
  e.kind = EventKind::kUprobe;
  e.probe = "/usr/bin/app:handle";
  e.pid = 42;
  e.tid = 43;
  e.nargs = 2;
  e.args = {7, 1000, 0, 0, 0, 0};
  e.has_ret = true;
  e.ret = -5;
  std::memcpy(e.comm.data(), "app", 3);
  e.service = "checkout";
  e.tags = {{"version", "v2"}, {"team", "pay"}, {"region", "eu"}};
  e.attributes = {{"field.category", "biometric"}, {"purpose", "clinical_research"},
                  {"consent.granted", "true"}, {"amount", "12.5"}, {"region", "us"}};
  return e;
}

struct Case {
  const char* condition;
  bool expected;
};

class RulesEvaluate : public ::testing::TestWithParam<Case> {};

TEST_P(RulesEvaluate, ConditionTable) {
  const Case& c = GetParam();
  auto rs = RuleSet::compile(std::string("rule \"t\" when ") + c.condition + " then drop = true end");
  EXPECT_EQ(rs.matches(0, sample_event()), c.expected) << c.condition;
}

INSTANTIATE_TEST_SUITE_P(
    Semantics, RulesEvaluate,
    ::testing::Values(
        // the issue's example: attribute lookup by full dotted name, bool coercion
        Case{"field.category == \"biometric\" && purpose == \"clinical_research\" && consent.granted == true", true},
        Case{"consent.granted", true},
        Case{"!consent.granted", false},
        // builtins
        Case{"service == \"checkout\"", true}, Case{"probe == \"/usr/bin/app:handle\"", true},
        Case{"kind == \"uprobe\"", true}, Case{"comm == \"app\"", true}, Case{"pid == 42", true},
        Case{"tid != 42", true}, Case{"ret < 0", true}, Case{"ret >= -5", true}, Case{"ret > -5", false},
        Case{"args[1] == 1000", true}, Case{"args[0] <= 7", true},
        // args beyond nargs are missing
        Case{"args[3] == 0", false}, Case{"args[3] != 0", true},
        // tags. and attributes. prefixes; bare names prefer attributes over tags
        Case{"tags.version == \"v2\"", true}, Case{"tags.region == \"eu\"", true},
        Case{"attributes.region == \"us\"", true}, Case{"region == \"us\"", true},
        Case{"team == \"pay\"", true},
        // numeric reading of attribute text is driven by the literal
        Case{"amount > 12", true}, Case{"amount == 12.5", true}, Case{"amount == \"12.5\"", true},
        Case{"amount < \"2\"", true},  // string order: "12.5" < "2"
        // type mismatch and missing: comparisons false, != true
        Case{"purpose > 3", false}, Case{"purpose == 3", false}, Case{"purpose != 3", true},
        Case{"purpose == true", false}, Case{"missing.field == \"x\"", false},
        Case{"missing.field != \"x\"", true}, Case{"missing.field < 1", false}, Case{"!missing.field", true},
        Case{"service == 1", false}, Case{"duration_ns > 0", false},
        // in / not in
        Case{"tags.version in [\"v1\", \"v2\"]", true}, Case{"tags.version in [\"v3\"]", false},
        Case{"pid in [1, 42]", true}, Case{"pid in []", false}, Case{"tags.version not in [\"v1\"]", true},
        Case{"missing in [\"x\"]", false}, Case{"missing not in [\"x\"]", true},
        // matches
        Case{"service matches \"^check\"", true}, Case{"service matches \"^out\"", false},
        Case{"pid matches \"4\"", false},
        // precedence: && binds tighter than ||; parentheses override
        Case{"true || false && false", true}, Case{"(true || false) && false", false},
        Case{"!false && !(pid == 1)", true}, Case{"false || pid == 42", true},
        Case{"true", true}, Case{"false", false}));

TEST(RulesEvaluate, RulesFireInOrderAndMergeActions) {
  auto rs = RuleSet::compile(R"(
rule "low" when pid == 42 then sample.rate = 0.5 end
rule "never" when pid == 1 then drop = true end
rule "lower" when service == "checkout" then sample.rate = 0.1 sample.exempt = true end
rule "drop" when ret < 0 then drop = true end
)");
  Decision d = rs.evaluate(sample_event());
  EXPECT_EQ(d.fired, (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_TRUE(d.exempt);
  EXPECT_TRUE(d.drop);
  EXPECT_EQ(d.rate, 0.1);
}

TEST(RulesEvaluate, NoRuleFiredLeavesDecisionEmpty) {
  auto rs = RuleSet::compile("rule \"x\" when pid == 1 then drop = true end");
  Decision d;
  d.drop = true;
  d.fired.push_back(9);
  rs.evaluate(sample_event(), d);
  EXPECT_FALSE(d.any());
  EXPECT_FALSE(d.drop);
  EXPECT_FALSE(d.rate.has_value());
}

TEST(RulesEvaluate, SteadyStateEvaluationDoesNotAllocate) {
  auto rs = RuleSet::compile(R"(
rule "a" when field.category == "biometric" && purpose == "clinical_research" && consent.granted == true
  then sample.exempt = true audit.trace = ["GDPR_Art9_2g"] end
rule "b" when tags.version in ["v1", "v2"] || amount > 100 then sample.rate = 0.5 end
rule "c" when !(pid < 10) && comm != "sshd" && ret < 0 then drop = true end
)");
  const Event e = sample_event();
  Decision d;
  rs.evaluate(e, d);  // first call may grow `fired`
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; i < 100; ++i) rs.evaluate(e, d);
  g_counting = false;
  EXPECT_EQ(g_allocs, 0u);
  EXPECT_EQ(d.fired.size(), 3u);
}

// `matches` runs std::regex, which allocates: a short-circuited right operand must not run.
TEST(RulesEvaluate, ShortCircuitSkipsTheRightOperand) {
  auto rs = RuleSet::compile(R"(
rule "or" when pid == 42 || service matches "^c.*t$" then drop = true end
rule "and" when pid == 1 && service matches "^c.*t$" then drop = true end
)");
  const Event e = sample_event();
  g_allocs = 0;
  g_counting = true;
  const bool or_result = rs.matches(0, e);
  const bool and_result = rs.matches(1, e);
  g_counting = false;
  EXPECT_TRUE(or_result);
  EXPECT_FALSE(and_result);
  EXPECT_EQ(g_allocs, 0u);
  // Control: when the left side does not decide, the regex runs (and allocates).
  auto control = RuleSet::compile("rule \"c\" when pid == 1 || service matches \"^c.*t$\" then drop = true end");
  g_allocs = 0;
  g_counting = true;
  const bool control_result = control.matches(0, e);
  g_counting = false;
  EXPECT_TRUE(control_result);
  EXPECT_GT(g_allocs, 0u);
}

TEST(RulesEvaluate, CudaFieldsOnlyExistOnCudaEvents) {
  auto rs = RuleSet::compile("rule \"k\" when cuda.kernel matches \"vecAdd\" then drop = true end");
  Event e = sample_event();
  e.cuda.kernel = "vecAdd(float*, int)";
  EXPECT_FALSE(rs.matches(0, e));
  e.kind = EventKind::kCuda;
  EXPECT_TRUE(rs.matches(0, e));
}

}  // namespace
}  // namespace mcp::rules

namespace mcp::rules {
namespace {

// Event strings come from traced programs: a huge one must not blow the agent's stack in
// std::regex (which recurses per character); only the first kMaxMatchSubject bytes count.
TEST(RulesEvaluate, MatchesOnAHugeStringIsBoundedAndSafe) {
  auto rs = RuleSet::compile(R"(rule "r" when payload matches "^(a|b)*c" then drop = true end)");
  Event e;
  e.attributes = {{"payload", std::string(kMaxMatchSubject - 1, 'a') + "c"}};
  EXPECT_TRUE(rs.matches(0, e));
  e.attributes = {{"payload", std::string(1 << 20, 'a') + "c"}};
  EXPECT_FALSE(rs.matches(0, e));  // the 'c' lies beyond the bound
}

}  // namespace
}  // namespace mcp::rules
