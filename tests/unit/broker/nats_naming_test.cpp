#include "broker/store/nats_naming.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace mcp::broker {
namespace {

TEST(SubjectToken, ReplacesCharactersNatsForbidsAndNamesTheEmptyService) {
  EXPECT_EQ(subject_token("checkout"), "checkout");
  EXPECT_EQ(subject_token("cart-v2_x"), "cart-v2_x");
  EXPECT_EQ(subject_token("cart.v2"), "cart_v2");
  EXPECT_EQ(subject_token("a b*c>d\te"), "a_b_c_d_e");
  EXPECT_EQ(subject_token(""), "_");
  EXPECT_EQ(subject_for("cart.v2"), "mcp.samples.cart_v2");
  EXPECT_EQ(subject_filter(""), "mcp.samples.>");
  EXPECT_EQ(subject_filter("checkout"), "mcp.samples.checkout");
}

TEST(MessageId, IsStablePerAgentSequenceAndPartAndUnambiguous) {
  EXPECT_EQ(message_id("node-1", 0, 42, 0), "node-1|42|0");
  EXPECT_NE(message_id("node-1", 0, 42, 0), message_id("node-1", 0, 42, 1));
  EXPECT_NE(message_id("node-1", 0, 42, 0), message_id("node-1", 0, 43, 0));
  // Issue 29: a restarted agent without its spool counts from 1 again under a new incarnation;
  // JetStream must not take its batches for the old ones.
  EXPECT_NE(message_id("node-1", 0x1234, 42, 0), message_id("node-1", 0, 42, 0));
  EXPECT_NE(message_id("node-1", 0x1234, 42, 0), message_id("node-1", 0x1235, 42, 0));
  // An agent id holding the separator cannot collide with another agent's id.
  EXPECT_NE(message_id("a|1", 0, 2, 0), message_id("a", 0, 1, 0) + "|2|0");
  EXPECT_EQ(message_id("a|1", 0, 2, 0).find("a|1"), std::string::npos);
}

TEST(PolicyKey, UsesOnlyKeyValueCharactersAndKeepsFieldsApart) {
  const std::string key = policy_key({"checkout", "/usr/bin/worker:handle_request", "00af"});
  for (char c : key) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_') << key;
  EXPECT_NE(policy_key({"ab", "c"}), policy_key({"a", "bc"}));
  EXPECT_NE(policy_key({"", "x"}), policy_key({"x", ""}));
  EXPECT_NE(policy_key({"a", "b"}), policy_key({"a", "b", "0"}));
  // Without a prefix, the key brokers before prefix rules wrote.
  EXPECT_EQ(policy_key({"", ""}), "p._._");
}

// A deleted key names the policy removed: the watcher of every broker decodes it to push the
// removal to its agents.
TEST(PolicyKey, ParsesBackToItsFieldsAndRejectsForeignKeys) {
  for (const PolicyKey& k : {PolicyKey{"checkout", "/usr/bin/worker:handle_request"}, PolicyKey{"", "x"},
                             PolicyKey{"x", ""}, PolicyKey{"", ""}, PolicyKey{"a.b_c", std::string("\0\xff", 2)},
                             PolicyKey{"checkout", "", "00af"}, PolicyKey{"", "", "0123456789abcdef0123456789abcdef"}})
    EXPECT_EQ(parse_policy_key(policy_key(k)), std::optional<PolicyKey>(k)) << k.service;
  for (const char* bad : {"", "p.", "p._", "q._._", "p.6.6162", "p.6g.61", "p.AB.61", "p.._", "p._._._", "p._._.",
                          "p._._.30.31"})
    EXPECT_EQ(parse_policy_key(bad), std::nullopt) << bad;
}

TEST(ParseNatsUrls, AcceptsListsWithOrWithoutSchemeAndRejectsOthers) {
  EXPECT_EQ(parse_nats_urls("nats://a:1, b:2 ,nats://c:3"),
            (std::vector<std::string>{"nats://a:1", "nats://b:2", "nats://c:3"}));
  EXPECT_THROW(parse_nats_urls(""), Error);
  EXPECT_THROW(parse_nats_urls(" , "), Error);
  EXPECT_THROW(parse_nats_urls("http://a:1"), Error);
  EXPECT_THROW(parse_nats_urls("nats://a"), Error);
  EXPECT_THROW(parse_nats_urls("a:port"), Error);
}

TEST(ParseNatsSource, ADomainAndAtMostOneServiceElseAUsageError) {
  const NatsSource all = parse_nats_source("cluster-a");
  EXPECT_EQ(all.domain, "cluster-a");
  EXPECT_EQ(all.service, "");
  const NatsSource one = parse_nats_source("a_1=check.out");
  EXPECT_EQ(one.domain, "a_1");
  EXPECT_EQ(one.service, "check.out");
  // Domains go into the API subject "$JS.<domain>.API": no dots, wildcards or spaces.
  for (const char* bad : {"", "=checkout", "a=", "a.b", "a*", "a>", "a b", "$JS"})
    EXPECT_THROW(parse_nats_source(bad), Error) << bad;
}

}  // namespace
}  // namespace mcp::broker
