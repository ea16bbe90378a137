// In-cluster configuration: the API server from the service environment variables, the
// service account files, overrides, and one line saying what is missing.
#include "kube/api_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;
using mcp::kube::ApiConfig;
using mcp::kube::resolve_api_config;

class ApiConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mcp-kube-config-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "token") << "t\n";
    std::ofstream(dir_ / "ca.crt") << "pem\n";
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
  }
  void TearDown() override {
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    fs::remove_all(dir_);
  }
  ApiConfig files() const { return {"", (dir_ / "token").string(), (dir_ / "ca.crt").string()}; }
  fs::path dir_;
};

TEST_F(ApiConfigTest, ServerComesFromTheServiceEnvironment) {
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  std::string why;
  const auto c = resolve_api_config(files(), why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->server, "https://10.96.0.1:6443");
  EXPECT_EQ(c->token_file, (dir_ / "token").string());
}

TEST_F(ApiConfigTest, Ipv6ServiceAddressIsBracketed) {
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  std::string why;
  const auto c = resolve_api_config(files(), why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
}

TEST_F(ApiConfigTest, OutsideAClusterSaysSo) {
  std::string why;
  EXPECT_FALSE(resolve_api_config(files(), why));
  EXPECT_NE(why.find("KUBERNETES_SERVICE_HOST"), std::string::npos) << why;
}

TEST_F(ApiConfigTest, MissingTokenIsNamed) {
  ApiConfig c = files();
  c.server = "https://127.0.0.1:1/";
  c.token_file = (dir_ / "absent").string();
  std::string why;
  EXPECT_FALSE(resolve_api_config(c, why));
  EXPECT_NE(why.find(c.token_file), std::string::npos) << why;
}

TEST_F(ApiConfigTest, ConfiguredServerNeedsNoEnvironmentAndLosesItsTrailingSlash) {
  ApiConfig c = files();
  c.server = "https://127.0.0.1:8443/";
  std::string why;
  const auto r = resolve_api_config(c, why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->server, "https://127.0.0.1:8443");
}

}  // namespace
