#include "broker/net/access.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace mcp::broker {
namespace {

TEST(Access, TokenFileLinesGrantRolesAndABareTokenGrantsAll) {
  const auto grants = parse_token_grants(
      "# comment\n\npublish P\nsubscribe,policy SQ\n  plain  \nall A\n", "tokens");
  ASSERT_EQ(grants.size(), 4u);
  EXPECT_EQ(roles_for_header(grants, "Bearer P"), kPublish);
  EXPECT_EQ(roles_for_header(grants, "Bearer SQ"), kSubscribe | kPolicy);
  EXPECT_EQ(roles_for_header(grants, "Bearer plain"), kAllRoles);
  EXPECT_EQ(roles_for_header(grants, "Bearer A"), kAllRoles);
  EXPECT_EQ(roles_for_header(grants, "Bearer Q"), 0);
  EXPECT_EQ(roles_for_header(grants, "Bearer PP"), 0);
  EXPECT_EQ(roles_for_header(grants, "P"), 0);
  EXPECT_EQ(role_names(kSubscribe | kPolicy), "subscribe,policy");
}

TEST(Access, RoleFilesHoldOneTokenPerLine) {
  const auto grants = parse_token_grants("T1\nT2\n", "pub", kPublish);
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(roles_for_header(grants, "Bearer T2"), kPublish);
  EXPECT_THROW(parse_token_grants("publish T1\n", "pub", kPublish), Error);
}

TEST(Access, BadTokenFilesAreUsageErrorsNamingTheLine) {
  try {
    parse_token_grants("publish P\nroot R\n", "tokens");
    FAIL() << "unknown role accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("tokens:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_token_grants("\n# only a comment\n", "tokens"), Error);
  EXPECT_THROW(parse_token_grants("publish a b\n", "tokens"), Error);
}

TEST(Access, TokenIdentityIsStableAndDoesNotContainTheToken) {
  EXPECT_EQ(token_identity("s3cret"), token_identity("s3cret"));
  EXPECT_NE(token_identity("s3cret"), token_identity("s3cres"));
  EXPECT_EQ(token_identity("s3cret").find("s3cret"), std::string::npos);
  EXPECT_EQ(token_identity("x").size(), std::string("token:").size() + 16);
}

TEST(Access, LoopbackListenAddresses) {
  for (const char* a : {"127.0.0.1:9090", "127.1.2.3:0", "localhost:1", "[::1]:9090", "unix:/run/b.sock"})
    EXPECT_TRUE(is_loopback_listen(a)) << a;
  for (const char* a : {"0.0.0.0:9090", "[::]:9090", "10.0.0.1:9090", ":9090", "broker:9090"})
    EXPECT_FALSE(is_loopback_listen(a)) << a;
}

}  // namespace
}  // namespace mcp::broker
