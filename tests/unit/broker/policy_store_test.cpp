#include "broker/policy_store.h"

#include <gtest/gtest.h>

#include <random>

#include "common/error.h"

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

TEST(PolicyStore, RejectsARateOutsideZeroToOne) {
  PolicyStore store;
  mcp::v1::Policy p;
  p.set_sampling_rate(1.5);
  EXPECT_THROW(store.apply(p), Error);
  p.set_sampling_rate(0);
  EXPECT_THROW(store.apply(p), Error);  // neither rate nor qps
  EXPECT_TRUE(store.list().empty());
}

}  // namespace
}  // namespace mcp::broker
