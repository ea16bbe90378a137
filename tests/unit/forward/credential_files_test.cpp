// Issue 51: files the forwarder takes from the operator, on real files. A broker token every
// user can read was used as is (whoever read it could publish as the agent), and a spool
// directory another user could write let them plant links root then wrote through.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/error.h"
#include "forward/channel.h"
#include "forward/forwarder.h"
#include "../../support/files.h"

namespace mcp {
namespace {

TEST(TokenFile, OneEveryUserCanReadIsRefusedAsSshRefusesSuchAKey) {
  const test::TempDir dir;
  const std::string token = dir.write("token", "s3cret\n").string();
  ASSERT_EQ(chmod(token.c_str(), 0644), 0);
  try {
    read_token_file(token);
    ADD_FAILURE() << "a world-readable token file was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()), "token file '" + token + "' is readable by every user (mode 0644): chmod o-r, e.g. 0600");
  }
  ASSERT_EQ(chmod(token.c_str(), 0600), 0);
  EXPECT_EQ(read_token_file(token), "s3cret");
  ASSERT_EQ(chmod(token.c_str(), 0440), 0);  // a group of readers is the operator's choice
  EXPECT_EQ(read_token_file(token), "s3cret");
}

TEST(Forwarder, RefusesAtStartATokenFileEveryUserCanRead) {
  const test::TempDir dir;
  ForwarderOptions o;
  o.brokers = {"127.0.0.1:1"};
  o.token_file = dir.write("token", "s3cret\n").string();
  ASSERT_EQ(chmod(o.token_file.c_str(), 0604), 0);
  EXPECT_THROW(Forwarder{o}, Error);
}

TEST(Forwarder, RefusesAtStartASpoolDirectoryOthersCanPlantLinksIn) {
  const test::TempDir dir;
  ForwarderOptions o;
  o.brokers = {"127.0.0.1:1"};
  o.spool_dir = dir.path();
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  try {
    Forwarder f(o);
    ADD_FAILURE() << "a world-writable spool directory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("spool: refusing directory " + dir.path().string() +
                                          ": it is writable by group or others without the sticky bit (mode 0777)", 0),
              0u)
        << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  ASSERT_EQ(chmod(dir.path().c_str(), 0700), 0);  // the normal path
  Forwarder f(o);
  EXPECT_EQ(f.stats().spool_dir, dir.path().string());
}

}  // namespace
}  // namespace mcp
