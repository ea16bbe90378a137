// Interval counts against FakeKernelMaps: each close reports what changed since the
// previous one, skips internal and idle probes, and labels rows with the service.
#include "runtime/interval_counts.h"

#include <gtest/gtest.h>

#include "fake_kernel_maps.h"

namespace mcp::runtime {
namespace {

TEST(IntervalCounts, EachCloseReportsTheDifferenceSinceThePreviousOne) {
  test::FakeKernelMaps maps;
  const uint32_t a = maps.add("syscall:getppid");
  maps.add("/lib/libcudart.so:__cudaGetKernel", true);
  const uint32_t idle = maps.add("syscall:read");
  IntervalCounts counts(16);
  maps.advance(0);
  maps.counters(a) = {10, 10, 1, 0, 2};
  Event e;
  e.probe_id = a;
  for (int i = 0; i < 9; i++) counts.on_delivered(e);
  auto first = counts.close(maps, [](uint32_t id) { return "svc" + std::to_string(id); });
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].probe, "syscall:getppid");
  EXPECT_EQ(first[0].service, "svc" + std::to_string(a));
  EXPECT_EQ(first[0].seen, 10u);
  EXPECT_EQ(first[0].lost, 1u);
  EXPECT_EQ(first[0].orphaned, 2u);
  EXPECT_EQ(first[0].delivered, 9u);
  maps.counters(a) = {25, 25, 1, 0, 2};
  for (int i = 0; i < 15; i++) counts.on_delivered(e);
  auto second = counts.close(maps, {});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].seen, 15u);
  EXPECT_EQ(second[0].lost, 0u);
  EXPECT_EQ(second[0].delivered, 15u);
  EXPECT_EQ(counts.delivered(a), 24u);
  EXPECT_EQ(counts.delivered(idle), 0u);
  EXPECT_TRUE(counts.close(maps, {}).empty());  // nothing new
}

}  // namespace
}  // namespace mcp::runtime
