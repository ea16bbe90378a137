#include "clock/timestamper.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <thread>

namespace mcp::clock {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(Timestamper, FillsCalibratedWallTimeAndIncreasingHlc) {
  SimulatedClockOptions o;
  o.drift_ppm = 37.0;
  auto sim = std::make_shared<SimulatedClockSource>(o);
  Timestamper stamper(sim);
  for (int i = 0; i < 20; ++i) {
    sim->advance(100'000'000);
    stamper.calibrator().tick();
  }
  Event a, b, c;
  a.ktime_ns = static_cast<uint64_t>(sim->now_monotonic_ns());
  b.ktime_ns = a.ktime_ns + 1000;
  c.ktime_ns = a.ktime_ns - 5 * kMs;  // out of kernel order (another CPU)
  stamper.stamp(a);
  stamper.stamp(b);
  stamper.stamp(c);
  EXPECT_NEAR(double(a.ts_ns), double(sim->true_realtime_at(int64_t(a.ktime_ns))), 100.0);
  EXPECT_EQ(b.ts_ns - a.ts_ns, 1000u);
  EXPECT_EQ(c.ts_ns, stamper.to_wall_ns(c.ktime_ns));
  EXPECT_LT(c.ts_ns, a.ts_ns);
  EXPECT_EQ(hlc_unpack(a.hlc).physical_ms, a.ts_ns / kMs);
  EXPECT_GT(b.hlc, a.hlc);
  EXPECT_GT(c.hlc, b.hlc);  // HLC order holds even where ts_ns goes back
  EXPECT_EQ(stamper.stats().hlc_last, c.hlc);
}

TEST(Timestamper, StatsReportAStepInTheWallClock) {
  auto sim = std::make_shared<SimulatedClockSource>();
  Timestamper stamper(sim);
  for (int i = 0; i < 10; ++i) {
    sim->advance(100'000'000);
    stamper.calibrator().tick();
  }
  sim->step_realtime(-10LL * 1'000'000'000);
  sim->advance(100'000'000);
  stamper.calibrator().tick();
  const auto s = stamper.stats();
  EXPECT_EQ(s.calibrator.steps, 1u);
  Event e;
  e.ktime_ns = static_cast<uint64_t>(sim->now_monotonic_ns());
  const uint64_t before = stamper.stats().hlc_last;
  stamper.stamp(e);
  EXPECT_NEAR(double(e.ts_ns), double(sim->true_realtime_at(int64_t(e.ktime_ns))), 1000.0);
  EXPECT_GT(e.hlc, before);
}

TEST(Timestamper, MergedRemoteStampOrdersLaterLocalEventsAfterIt) {
  auto sim = std::make_shared<SimulatedClockSource>();
  Timestamper stamper(sim);
  const uint64_t now_ms = uint64_t(sim->true_realtime_at(sim->now_monotonic_ns())) / kMs;
  const uint64_t remote = hlc_pack({now_ms + 200, 9});
  const auto merged = stamper.merge_remote(remote);
  EXPECT_TRUE(merged.accepted);
  EXPECT_GT(merged.packed, remote);
  Event e;
  e.ktime_ns = static_cast<uint64_t>(sim->now_monotonic_ns());
  stamper.stamp(e);
  EXPECT_GT(e.hlc, merged.packed);
  EXPECT_FALSE(stamper.merge_remote(hlc_pack({now_ms + 10'000, 0})).accepted);
  EXPECT_EQ(stamper.stats().hlc.rejected_remote, 1u);
}

TEST(Timestamper, SystemClockStampsKtimeCloseToRealtime) {
  Timestamper stamper;  // real CLOCK_MONOTONIC / CLOCK_REALTIME
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  Event e;
  e.ktime_ns = uint64_t(mono.tv_sec) * 1'000'000'000 + uint64_t(mono.tv_nsec);
  stamper.stamp(e);
  const double wall = double(real.tv_sec) * 1e9 + double(real.tv_nsec);
  // Generous: a wrong clock or unit would be off by seconds or years, not milliseconds.
  EXPECT_NEAR(double(e.ts_ns), wall, 50e6);
  EXPECT_NE(e.hlc, 0u);
}

TEST(Timestamper, BackgroundThreadKeepsSamplingAndStopsOnRequest) {
  TimestamperOptions options;
  options.calibrator.interval = std::chrono::milliseconds(5);
  options.calibrator.fast_interval = std::chrono::milliseconds(5);
  Timestamper stamper(system_clock_source(), options);
  const uint64_t initial = stamper.stats().calibrator.samples;
  stamper.start();
  EXPECT_TRUE(stamper.running());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (stamper.stats().calibrator.samples < initial + 3 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE(stamper.stats().calibrator.samples, initial + 3);
  stamper.stop();
  EXPECT_FALSE(stamper.running());
  const uint64_t after_stop = stamper.stats().calibrator.samples;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(stamper.stats().calibrator.samples, after_stop);
}

}  // namespace
}  // namespace mcp::clock
