#include "clock/hlc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

namespace mcp::clock {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kBaseMs = 1'700'000'000'000;  // a plausible wall clock, in ms

uint64_t pack(uint64_t ms, uint16_t logical) { return hlc_pack({ms, logical}); }

TEST(Hlc, PackUnpackRoundTrips) {
  const HlcTimestamp cases[] = {{0, 0}, {kBaseMs, 0}, {kBaseMs, 1}, {kBaseMs, 0xffff},
                                {kHlcPhysicalMax, 0xffff}, {123456789, 4242}};
  for (const auto& ts : cases) {
    EXPECT_EQ(hlc_unpack(hlc_pack(ts)), ts);
  }
  EXPECT_EQ(pack(kBaseMs, 7), (kBaseMs << 16) | 7);
  // Packed order is timestamp order.
  EXPECT_LT(pack(kBaseMs, 0xffff), pack(kBaseMs + 1, 0));
}

TEST(Hlc, NeverBehindPhysicalAndStrictlyIncreasingWhenPhysicalJumpsAround) {
  Hlc hlc;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> jump(-50 * int64_t(kMs), 50 * int64_t(kMs));
  uint64_t physical = kBaseMs * kMs;
  uint64_t previous = 0;
  for (int i = 0; i < 100'000; ++i) {
    physical += jump(rng);  // goes backwards about half the time
    const uint64_t stamp = hlc.now(physical);
    ASSERT_GE(hlc_unpack(stamp).physical_ms, physical / kMs);
    ASSERT_GT(stamp, previous);
    previous = stamp;
  }
}

TEST(Hlc, TakesPhysicalTimeWithZeroCounterWhenPhysicalIsAhead) {
  Hlc hlc;
  EXPECT_EQ(hlc.now(kBaseMs * kMs), pack(kBaseMs, 0));
  EXPECT_EQ(hlc.now(kBaseMs * kMs + 10), pack(kBaseMs, 1));       // same ms: count
  EXPECT_EQ(hlc.now((kBaseMs - 3) * kMs), pack(kBaseMs, 2));      // physical behind: count
  EXPECT_EQ(hlc.now((kBaseMs + 1) * kMs + 5), pack(kBaseMs + 1, 0));  // new ms: reset counter
}

TEST(Hlc, FullCounterCarriesIntoPhysicalPartInsteadOfWrapping) {
  Hlc hlc;
  const uint64_t physical = kBaseMs * kMs;
  uint64_t previous = 0;
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    previous = hlc.now(physical);
  }
  EXPECT_EQ(previous, pack(kBaseMs, 0xffff));
  EXPECT_EQ(hlc.stats().counter_overflows, 0u);
  const uint64_t carried = hlc.now(physical);
  EXPECT_EQ(carried, pack(kBaseMs + 1, 0));
  EXPECT_GT(carried, previous);
  EXPECT_EQ(hlc.stats().counter_overflows, 1u);
  // Once physical time catches up the clock is back on it.
  EXPECT_EQ(hlc.now((kBaseMs + 2) * kMs), pack(kBaseMs + 2, 0));
}

TEST(Hlc, MergeFollowsThePaperRules) {
  const uint64_t physical = kBaseMs * kMs;
  {  // equal physical parts: max(counter) + 1
    Hlc hlc;
    hlc.now(physical);
    hlc.now(physical);  // local (base, 1)
    EXPECT_EQ(hlc.merge(pack(kBaseMs, 5), physical).packed, pack(kBaseMs, 6));
    Hlc other;
    for (int i = 0; i < 10; ++i) other.now(physical);  // local (base, 9)
    EXPECT_EQ(other.merge(pack(kBaseMs, 5), physical).packed, pack(kBaseMs, 10));
  }
  {  // local ahead of remote and physical: local counter + 1
    Hlc hlc;
    hlc.now((kBaseMs + 100) * kMs);  // local (base+100, 0), e.g. from an earlier merge
    EXPECT_EQ(hlc.merge(pack(kBaseMs + 50, 9), physical).packed, pack(kBaseMs + 100, 1));
  }
  {  // remote ahead of local and physical: remote counter + 1
    Hlc hlc;
    hlc.now(physical);
    const auto result = hlc.merge(pack(kBaseMs + 200, 3), physical);
    EXPECT_TRUE(result.accepted);
    EXPECT_EQ(result.packed, pack(kBaseMs + 200, 4));
    EXPECT_EQ(hlc.now(physical), pack(kBaseMs + 200, 5));  // later local events stay after it
  }
  {  // physical ahead of both: physical, counter 0
    Hlc hlc;
    hlc.now(physical);
    EXPECT_EQ(hlc.merge(pack(kBaseMs - 10, 77), (kBaseMs + 1) * kMs).packed, pack(kBaseMs + 1, 0));
  }
}

TEST(Hlc, ReceiveIsOrderedAfterSendAcrossNodesWithSkewedClocks) {
  // Node B's physical clock is 300 ms behind node A's; messages bounce A -> B -> A.
  Hlc a, b;
  uint64_t phys_a = kBaseMs * kMs;
  uint64_t phys_b = phys_a - 300 * kMs;
  for (int round = 0; round < 1000; ++round) {
    const uint64_t send_a = a.now(phys_a);
    const auto recv_b = b.merge(send_a, phys_b);
    ASSERT_TRUE(recv_b.accepted);
    ASSERT_GT(recv_b.packed, send_a);
    const uint64_t send_b = b.now(phys_b);
    const auto recv_a = a.merge(send_b, phys_a);
    ASSERT_GT(recv_a.packed, send_b);
    phys_a += 17'000;  // time moves slower than the message rate: counters do the ordering
    phys_b += 17'000;
  }
}

TEST(Hlc, RejectsAndCountsRemoteTooFarAheadSoDriftStaysBounded) {
  Hlc hlc(HlcOptions{std::chrono::milliseconds(500)});
  const uint64_t physical = kBaseMs * kMs;
  const auto far = hlc.merge(pack(kBaseMs + 501, 0), physical);
  EXPECT_FALSE(far.accepted);
  EXPECT_EQ(hlc_unpack(far.packed).physical_ms, kBaseMs);  // the clock did not jump
  EXPECT_EQ(hlc.stats().rejected_remote, 1u);
  EXPECT_EQ(hlc.stats().merged, 0u);

  const auto near = hlc.merge(pack(kBaseMs + 500, 0), physical);
  EXPECT_TRUE(near.accepted);
  EXPECT_EQ(near.packed, pack(kBaseMs + 500, 1));
  EXPECT_EQ(hlc.stats().merged, 1u);

  // Bound: whatever remotes send, the local clock never leads physical time by more than the
  // maximum offset (counters aside).
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint64_t> ahead(0, 2000);
  uint64_t phys = physical;
  for (int i = 0; i < 10'000; ++i) {
    phys += 100'000;
    hlc.merge(pack(phys / kMs + ahead(rng), 0), phys);
    const uint64_t local = hlc.now(phys);
    ASSERT_LE(hlc_unpack(local).physical_ms, phys / kMs + 500);
  }
  EXPECT_GT(hlc.stats().rejected_remote, 1000u);
}

TEST(Hlc, ConcurrentStampsFromFourThreadsAreUniqueAndPerThreadIncreasing) {
  Hlc hlc;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200'000;
  std::vector<std::vector<uint64_t>> stamps(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto& mine = stamps[t];
      mine.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        // Physical time shared loosely (each thread its own view, some behind the others).
        const uint64_t physical = kBaseMs * kMs + uint64_t(i) * 1000 + uint64_t(t) * 5 * kMs;
        mine.push_back(t == 3 && i % 100 == 0 ? hlc.merge(hlc.last(), physical).packed
                                              : hlc.now(physical));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(std::is_sorted(stamps[t].begin(), stamps[t].end()));
    ASSERT_EQ(std::adjacent_find(stamps[t].begin(), stamps[t].end()), stamps[t].end());
    all.insert(all.end(), stamps[t].begin(), stamps[t].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate HLC stamp";
  EXPECT_EQ(all.back(), hlc.last());
}

}  // namespace
}  // namespace mcp::clock
