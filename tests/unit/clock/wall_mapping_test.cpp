#include "clock/wall_mapping.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace mcp::clock {
namespace {

TEST(WallMapping, AppliesOffsetAndDriftInBothDirections) {
  const WallMapping m{1'000'000'000'000, 1'700'000'000'000'000'000, 37e-6};
  EXPECT_EQ(m.wall_ns(m.mono_anchor), m.wall_anchor);
  EXPECT_EQ(m.wall_ns(m.mono_anchor + 1'000'000'000), m.wall_anchor + 1'000'000'000 + 37'000);
  EXPECT_EQ(m.wall_ns(m.mono_anchor - 1'000'000'000), m.wall_anchor - 1'000'000'000 - 37'000);
}

TEST(PublishedMapping, ReadersNeverSeeATornMappingWhileItIsRepublished) {
  // Every published mapping satisfies wall_anchor == 3 * mono_anchor and drift == mono * 1e-12;
  // a reader that mixed fields from two publishes would break the relation. The writer keeps
  // publishing until every reader has done its reads, so they overlap however threads are
  // scheduled.
  constexpr int kReaders = 2;
  constexpr int kReadsEach = 20'000'000;
  PublishedMapping cell;
  cell.publish({1, 3, 1e-12});
  std::atomic<int> finished{0};
  std::atomic<uint64_t> torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      uint64_t bad = 0;
      for (int i = 0; i < kReadsEach; ++i) {
        const WallMapping m = cell.load();
        bad += m.wall_anchor != 3 * m.mono_anchor ||
               m.drift != static_cast<double>(m.mono_anchor) * 1e-12;
      }
      torn.fetch_add(bad);
      finished.fetch_add(1);
    });
  }
  int64_t k = 2;
  for (; finished.load(std::memory_order_relaxed) < kReaders; ++k) {
    cell.publish({k, 3 * k, static_cast<double>(k) * 1e-12});
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(cell.load().mono_anchor, k - 1);
}

}  // namespace
}  // namespace mcp::clock
