// Backoff (common/backoff.h): equal jitter within [d/2, d], d doubling up to the cap, a
// success starting it over, and fail-over through the endpoints in their order.
#include "common/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace mcp {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, EachWaitIsWithinHalfToAllOfItsStep) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Backoff b(milliseconds(100), milliseconds(5000), 1, seed);
    milliseconds step(100);
    for (int i = 0; i < 10; ++i) {
      const milliseconds wait = b.failed();
      EXPECT_GE(wait, step / 2) << "seed " << seed << " failure " << i;
      EXPECT_LE(wait, step) << "seed " << seed << " failure " << i;
      step = std::min(step * 2, milliseconds(5000));
    }
  }
}

TEST(Backoff, GrowsToTheCapAndStaysThere) {
  Backoff b(milliseconds(100), milliseconds(1000), 1, 7);
  for (int i = 0; i < 4; ++i) b.failed();  // 100, 200, 400, 800
  for (int i = 0; i < 20; ++i) {
    const milliseconds wait = b.failed();
    EXPECT_GE(wait, milliseconds(500));
    EXPECT_LE(wait, milliseconds(1000));
  }
}

// The waits are spread (clients that failed together do not retry in step), not one value.
TEST(Backoff, TheJitterSpreadsTheWaits) {
  std::set<milliseconds::rep> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) seen.insert(Backoff(milliseconds(1000), milliseconds(1000), 1, seed).failed().count());
  EXPECT_GT(seen.size(), 20u);
  EXPECT_GE(*seen.begin(), 500);
  EXPECT_LE(*seen.rbegin(), 1000);
}

TEST(Backoff, ASuccessStartsOverFromTheInitialStep) {
  Backoff b(milliseconds(100), milliseconds(5000), 1, 3);
  for (int i = 0; i < 6; ++i) b.failed();
  EXPECT_GE(b.failed(), milliseconds(1600));  // the seventh: step 6400 capped at 5000
  b.succeeded();
  const milliseconds wait = b.failed();
  EXPECT_GE(wait, milliseconds(50));
  EXPECT_LE(wait, milliseconds(100));
}

TEST(Backoff, FailsOverThroughTheEndpointsInOrder) {
  Backoff b(milliseconds(10), milliseconds(100), 3, 1);
  std::vector<size_t> order;
  for (int i = 0; i < 7; ++i) {
    order.push_back(b.endpoint());
    b.failed();
  }
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 0, 1, 2, 0}));
  b.succeeded();
  EXPECT_EQ(b.endpoint(), 1u) << "a success keeps the endpoint that worked";
  Backoff one(milliseconds(10), milliseconds(100), 1, 1);
  one.failed();
  EXPECT_EQ(one.endpoint(), 0u);
}

}  // namespace
}  // namespace mcp
