#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "rules/ruleset.h"

namespace mcp::rules {
namespace {

Event patient_event() {
  Event e;
  e.ts_ns = 1700000000000000000ull;
  e.probe = "/usr/bin/ehr:store_record";
  e.pid = 100;
  e.nargs = 3;
  e.args = {11, 22, 33, 0, 0, 0};
  std::memcpy(e.comm.data(), "ehr-server", 10);
  e.service = "ehr";
  e.tags = {{"user", "alice"}, {"version", "v1"}};
  e.attributes = {{"field.category", "biometric"}, {"patient.name", "Bob"}, {"ssn", "123-45-6789"}};
  e.cuda.user_stack = {1, 2, 3};
  e.stack = {{0x401000, "handler", 4, "/srv/app"}};
  return e;
}

size_t count_attr(const Event& e, const std::string& k, const std::string& v) {
  return std::count(e.attributes.begin(), e.attributes.end(), std::make_pair(k, v));
}

TEST(RulesApply, RedactsNamedFieldsInPlaceAndTagsTheAudit) {
  auto rs = RuleSet::compile(R"(
rule "pii" when service == "ehr" then
  redact = ["args[1]", "comm", "tags.user", "patient.name", "attributes.ssn"]
  audit.trace = ["GDPR_Art5", "HIPAA_164.514"]
end)");
  Event e = patient_event();
  Decision d = apply(rs, e);
  EXPECT_TRUE(d.any());
  EXPECT_EQ(e.args[0], 11u);
  EXPECT_EQ(e.args[1], 0u);
  EXPECT_EQ(e.args[2], 33u);
  EXPECT_EQ(e.comm_view(), kRedacted);
  EXPECT_EQ(e.tags[0].second, kRedacted);
  EXPECT_EQ(e.tags[1].second, "v1");
  EXPECT_EQ(e.attributes[0].second, "biometric");
  EXPECT_EQ(e.attributes[1].second, kRedacted);
  EXPECT_EQ(e.attributes[2].second, kRedacted);
  EXPECT_EQ(count_attr(e, "audit.rule", "pii"), 1u);
  EXPECT_EQ(count_attr(e, "audit.trace", "GDPR_Art5"), 1u);
  EXPECT_EQ(count_attr(e, "audit.trace", "HIPAA_164.514"), 1u);
}

TEST(RulesApply, ExemptionStripsThePayloadButKeepsIdentity) {
  auto rs = RuleSet::compile(R"(
rule "health_record_anonymization"
when field.category == "biometric"
then
  sample.exempt = true
  audit.trace = ["GDPR_Art9_2g"]
end)");
  Event e = patient_event();
  Decision d = apply(rs, e);
  EXPECT_TRUE(d.exempt);
  EXPECT_EQ(e.args, (std::array<uint64_t, 6>{}));
  EXPECT_TRUE(e.cuda.user_stack.empty());
  EXPECT_TRUE(e.stack.empty());  // code addresses and names are withheld too
  EXPECT_EQ(count_attr(e, "ssn", "123-45-6789"), 0u);
  EXPECT_EQ(count_attr(e, "mcp.exempt", "true"), 1u);
  EXPECT_EQ(count_attr(e, "audit.trace", "GDPR_Art9_2g"), 1u);
  EXPECT_EQ(e.pid, 100u);
  EXPECT_EQ(e.service, "ehr");
}

// Pod identity is matched and redacted like the container id: a rule can keep one tenant's
// pods from naming themselves off the node.
TEST(RulesApply, PodIdentityIsMatchedAndRedactable) {
  auto rs = RuleSet::compile(R"(
rule "hide_pod" when pod_uid == "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f" then
  redact = ["pod_uid", "container_id"]
end)");
  Event e = patient_event();
  EXPECT_FALSE(apply(rs, e).any()) << "no pod: the field is missing, == is false";
  e.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  e.container_id = std::string(64, 'a');
  EXPECT_TRUE(apply(rs, e).any());
  EXPECT_EQ(e.pod_uid, kRedacted);
  EXPECT_EQ(e.container_id, kRedacted);
}

TEST(RulesApply, NonMatchingEventIsUntouched) {
  auto rs = RuleSet::compile("rule \"x\" when service == \"other\" then redact = [\"args\"] end");
  Event e = patient_event();
  Decision d = apply(rs, e);
  EXPECT_FALSE(d.any());
  EXPECT_EQ(e.args[0], 11u);
  EXPECT_EQ(e.attributes.size(), 3u);
}

TEST(RulesApply, AuditRecordNamesRulesConditionsAndIds) {
  auto rs = RuleSet::compile(R"(rule "a" when pid == 100 then audit.trace = ["X1"] end
rule "b" when pid == 1 then drop = true end)");
  Event e = patient_event();
  Decision d = rs.evaluate(e);
  const auto j = nlohmann::json::parse(audit_record(rs, d, e));
  EXPECT_EQ(j["ts_ns"], e.ts_ns);
  EXPECT_EQ(j["probe"], "/usr/bin/ehr:store_record");
  ASSERT_EQ(j["rules"].size(), 1u);
  EXPECT_EQ(j["rules"][0]["rule"], "a");
  EXPECT_EQ(j["rules"][0]["when"], "pid == 100");
  EXPECT_EQ(j["rules"][0]["audit"], nlohmann::json::array({"X1"}));
}

}  // namespace
}  // namespace mcp::rules
