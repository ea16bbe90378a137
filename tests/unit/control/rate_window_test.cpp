#include "control/rate_window.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace mcp::control {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 5'000 * kMs;  // arbitrary monotonic origin

TEST(RateWindow, FirstObservationOnlySetsTheBaseline) {
  RateWindow w;
  w.observe(kT0, 123'456);
  EXPECT_FALSE(w.has_rate());
  EXPECT_EQ(w.rate_per_s(), 0.0);
}

TEST(RateWindow, SteadyTicksGiveTheExactRate) {
  RateWindow w;
  uint64_t value = 0;
  for (int i = 0; i <= 30; ++i) {
    w.observe(kT0 + i * 100 * kMs, value);
    value += 500;  // 5k/s
  }
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 5000.0);
  EXPECT_EQ(w.covered(), std::chrono::seconds(1));
  EXPECT_DOUBLE_EQ(w.count_in_window(), 5000.0);
}

TEST(RateWindow, PartialWindowAtStartUpDividesByTimeObserved) {
  RateWindow w;
  w.observe(kT0, 0);
  w.observe(kT0 + 100 * kMs, 100);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);  // not 100/s as a full 1 s window would say
  w.observe(kT0 + 300 * kMs, 300);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);
  EXPECT_EQ(w.covered(), std::chrono::milliseconds(300));
}

TEST(RateWindow, OldBucketsLeaveTheWindow) {
  RateWindow w;
  uint64_t value = 0;
  w.observe(kT0, value);
  for (int i = 1; i <= 10; ++i) w.observe(kT0 + i * 100 * kMs, value += 1000);  // 10k/s
  for (int i = 11; i <= 20; ++i) w.observe(kT0 + i * 100 * kMs, value += 100);  // 1k/s
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);
  for (int i = 21; i <= 25; ++i) w.observe(kT0 + i * 100 * kMs, value);  // silence
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 500.0);
}

TEST(RateWindow, LateTickIsSpreadOverTheBucketsItCovers) {
  RateWindow w;
  uint64_t value = 0;
  for (int i = 0; i <= 10; ++i) w.observe(kT0 + i * 100 * kMs, value += (i ? 100 : 0));
  // One tick 400 ms late carrying 500 events: the same 1k/s, not a 5k/s spike in one bucket.
  w.observe(kT0 + 1500 * kMs, value += 500);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);
  EXPECT_DOUBLE_EQ(w.rate_per_s(std::chrono::milliseconds(200)), 1000.0);
}

TEST(RateWindow, GapLongerThanTheWindowKeepsOnlyItsTail) {
  RateWindow w;
  w.observe(kT0, 0);
  w.observe(kT0 + 100 * kMs, 1000);   // 10k/s
  w.observe(kT0 + 5100 * kMs, 6000);  // 5 s gap at 1k/s
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);
}

TEST(RateWindow, CounterResetCountsTheNewValueAsTheIncrease) {
  RateWindow w;
  w.observe(kT0, 0);
  for (int i = 1; i <= 10; ++i) w.observe(kT0 + i * 100 * kMs, i * 100);
  w.observe(kT0 + 1100 * kMs, 100);  // reset to 0, then 100 more events
  EXPECT_EQ(w.resets(), 1u);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);  // not a wrap-around to ~1.8e19
}

TEST(RateWindow, UnalignedTicksStillGiveTheRate) {
  RateWindow w;
  uint64_t t = kT0 + 37 * kMs;
  uint64_t value = 0;
  w.observe(t, value);
  const uint64_t steps[] = {93, 107, 100, 88, 131, 95, 104, 99, 101, 112, 90, 97};
  for (uint64_t step : steps) {
    t += step * kMs;
    value += step * 2;  // 2k/s whatever the tick length
    w.observe(t, value);
  }
  EXPECT_NEAR(w.rate_per_s(), 2000.0, 1e-6);
  EXPECT_GT(w.covered(), std::chrono::milliseconds(900));
  EXPECT_LE(w.covered(), std::chrono::seconds(1));
}

TEST(RateWindow, ShortSpanFollowsAStepBeforeTheFullWindow) {
  RateWindow w;
  uint64_t value = 0;
  w.observe(kT0, value);
  for (int i = 1; i <= 10; ++i) w.observe(kT0 + i * 100 * kMs, value += 100);   // 1k/s
  for (int i = 11; i <= 13; ++i) w.observe(kT0 + i * 100 * kMs, value += 400);  // 4k/s
  EXPECT_DOUBLE_EQ(w.rate_per_s(std::chrono::milliseconds(300)), 4000.0);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), (7 * 100 + 3 * 400) / 1.0);
}

TEST(RateWindow, TimeGoingBackwardsDoesNotCorruptTheWindow) {
  RateWindow w;
  w.observe(kT0, 0);
  w.observe(kT0 + 100 * kMs, 100);
  w.observe(kT0 + 50 * kMs, 150);  // clock hiccup: counted at the last timestamp
  w.observe(kT0 + 200 * kMs, 200);
  EXPECT_DOUBLE_EQ(w.count_in_window(), 200.0);
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 1000.0);
}

TEST(RateWindow, ConfigurableBucketsAndWindow) {
  RateWindow w(RateWindowConfig{std::chrono::milliseconds(10), 5});  // 50 ms window
  EXPECT_EQ(w.window(), std::chrono::milliseconds(50));
  uint64_t value = 0;
  w.observe(kT0, value);
  for (int i = 1; i <= 10; ++i) w.observe(kT0 + i * 10 * kMs, value += (i <= 5 ? 1 : 3));
  EXPECT_DOUBLE_EQ(w.rate_per_s(), 300.0);  // only the last 50 ms (3 per 10 ms) count
}

TEST(RateWindow, RejectsEmptyConfig) {
  EXPECT_THROW(RateWindow(RateWindowConfig{std::chrono::milliseconds(0), 10}), mcp::Error);
  EXPECT_THROW(RateWindow(RateWindowConfig{std::chrono::milliseconds(100), 0}), mcp::Error);
}

}  // namespace
}  // namespace mcp::control
