#include <gtest/gtest.h>

#include "rules/ruleset.h"

namespace mcp::rules {
namespace {

constexpr const char* kExample = R"(rule "health_record_anonymization"
when
  field.category == "biometric" && purpose == "clinical_research" && consent.granted == true
then
  sample.exempt = true
  audit.trace = ["GDPR_Art9_2g", "GB_T22239_8.2.3.1"]
end
)";

TEST(RulesCompile, IssueExampleCompilesWithItsActions) {
  auto rs = RuleSet::compile(kExample);
  ASSERT_EQ(rs.size(), 1u);
  const Rule& r = rs.rule(0);
  EXPECT_EQ(r.name, "health_record_anonymization");
  EXPECT_EQ(r.pos, (SourcePos{1, 1}));
  EXPECT_EQ(r.condition_text,
            "field.category == \"biometric\" && purpose == \"clinical_research\" && consent.granted == true");
  EXPECT_EQ(r.actions.exempt, true);
  EXPECT_FALSE(r.actions.drop.has_value());
  EXPECT_EQ(r.actions.audit, (std::vector<std::string>{"GDPR_Art9_2g", "GB_T22239_8.2.3.1"}));
}

TEST(RulesCompile, EmptySourceIsAnEmptySet) {
  EXPECT_TRUE(RuleSet::compile("").empty());
  EXPECT_TRUE(RuleSet::compile("  # nothing\n").empty());
}

TEST(RulesCompile, ParsesEveryActionForm) {
  auto rs = RuleSet::compile(R"(
rule "a" when pid > 1 then
  drop = true
  sample.rate = 0.25
  redact = ["args[1]", "comm", "tags.user", "attributes.ssn", "email"]
end
rule "b" when !(kind == "syscall") then sample.drop = false redact.fields = "args" end
)");
  ASSERT_EQ(rs.size(), 2u);
  const Actions& a = rs.rule(0).actions;
  EXPECT_EQ(a.drop, true);
  EXPECT_EQ(a.rate, 0.25);
  ASSERT_EQ(a.redact.size(), 5u);
  EXPECT_EQ(a.redact[0].kind, FieldRef::Kind::kArg);
  EXPECT_EQ(a.redact[0].index, 1);
  EXPECT_EQ(a.redact[1].kind, FieldRef::Kind::kComm);
  EXPECT_EQ(a.redact[2].kind, FieldRef::Kind::kTag);
  EXPECT_EQ(a.redact[2].name, "user");
  EXPECT_EQ(a.redact[3].kind, FieldRef::Kind::kAttribute);
  EXPECT_EQ(a.redact[3].name, "ssn");
  EXPECT_EQ(a.redact[4].kind, FieldRef::Kind::kAttributeOrTag);
  EXPECT_EQ(rs.rule(1).actions.drop, false);
  EXPECT_EQ(rs.rule(1).actions.redact[0].kind, FieldRef::Kind::kArgs);
}

struct BadSource {
  const char* src;
  SourcePos pos;
  const char* fragment;
};

class RulesCompileError : public ::testing::TestWithParam<BadSource> {};

TEST_P(RulesCompileError, ReportsPositionAndReason) {
  const BadSource& p = GetParam();
  try {
    RuleSet::compile(p.src);
    FAIL() << "compiled: " << p.src;
  } catch (const RulesError& e) {
    EXPECT_EQ(e.pos(), p.pos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p.fragment), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), ExitCode::kUsage);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Positions, RulesCompileError,
    ::testing::Values(
        BadSource{"when a then drop = true end", {1, 1}, "expected 'rule'"},
        BadSource{"rule x when a then drop = true end", {1, 6}, "expected string"},
        BadSource{"rule \"\" when a then drop = true end", {1, 6}, "must not be empty"},
        BadSource{"rule \"x\" if a then drop = true end", {1, 10}, "expected 'when'"},
        BadSource{"rule \"x\" when then drop = true end", {1, 15}, "expected a condition"},
        BadSource{"rule \"x\"\nwhen a == \nthen drop = true end", {3, 1}, "expected a field or a literal"},
        BadSource{"rule \"x\" when a == 1 drop = true end", {1, 22}, "expected 'then'"},
        BadSource{"rule \"x\" when (a == 1 then drop = true end", {1, 23}, "to close '(' at 1:15"},
        BadSource{"rule \"x\" when a == 1 then\n  sample.exmpt = true\nend", {2, 3}, "unknown action 'sample.exmpt'"},
        BadSource{"rule \"x\" when a == 1 then sample.exempt = 1 end", {1, 43}, "takes true or false"},
        BadSource{"rule \"x\" when a == 1 then sample.rate = 1.5 end", {1, 41}, "(0, 1]"},
        BadSource{"rule \"x\" when a == 1 then sample.rate = 0 end", {1, 41}, "(0, 1]"},
        BadSource{"rule \"x\" when a == 1 then redact = [\"pid\"] end", {1, 37}, "cannot redact 'pid'"},
        BadSource{"rule \"x\" when a == 1 then redact = [\"args[7]\"] end", {1, 37}, "args[0] .. args[5]"},
        BadSource{"rule \"x\" when a == 1 then redact = [] end", {1, 36}, "at least one"},
        BadSource{"rule \"x\" when a == 1 then audit.trace = [\"a\", 3] end", {1, 47}, "takes strings"},
        BadSource{"rule \"x\" when a == 1 then drop = true drop = false end", {1, 39}, "assigned twice"},
        BadSource{"rule \"x\" when a == 1 then end", {1, 27}, "has no actions"},
        BadSource{"rule \"x\" when a == 1 then drop = true", {1, 38}, "expected 'end'"},
        BadSource{"rule \"x\" when a > true then drop = true end", {1, 17}, "booleans"},
        BadSource{"rule \"x\" when 3 then drop = true end", {1, 15}, "expected a comparison"},
        BadSource{"rule \"x\" when a in 3 then drop = true end", {1, 20}, "to open the list"},
        BadSource{"rule \"x\" when a in [b] then drop = true end", {1, 21}, "expected a literal"},
        BadSource{"rule \"x\" when a not 3 then drop = true end", {1, 21}, "expected 'in' after 'not'"},
        BadSource{"rule \"x\" when a matches \"(\" then drop = true end", {1, 25}, "bad regex"},
        BadSource{"rule \"x\" when a matches b then drop = true end", {1, 25}, "regex string"},
        BadSource{"rule \"x\" when args == 1 then drop = true end", {1, 15}, "'args' is a list"},
        BadSource{"rule \"x\" when tags.a[1] == 1 then drop = true end", {1, 15}, "only args[N]"},
        BadSource{"rule \"x\" when a then drop = true end\nrule \"x\" when a then drop = true end", {2, 6},
                  "duplicate rule name"}));

TEST(RulesCompile, DeepNestingIsAnErrorNotACrash) {
  std::string src = "rule \"x\" when " + std::string(5000, '(') + "a" + std::string(5000, ')') +
                    " then drop = true end";
  EXPECT_THROW(RuleSet::compile(src), RulesError);
  std::string bangs = "rule \"x\" when " + std::string(5000, '!') + "a then drop = true end";
  EXPECT_THROW(RuleSet::compile(bangs), RulesError);
}

TEST(RulesCompile, LongConjunctionChainCompilesAndEvaluates) {
  std::string cond = "pid == 7";
  for (int i = 0; i < 20000; ++i) cond += " && pid == 7";
  auto rs = RuleSet::compile("rule \"x\" when " + cond + " then drop = true end");
  Event e;
  e.pid = 7;
  EXPECT_TRUE(rs.matches(0, e));
  e.pid = 8;
  EXPECT_FALSE(rs.matches(0, e));
}

}  // namespace
}  // namespace mcp::rules
