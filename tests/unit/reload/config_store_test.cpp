#include "reload/config_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace mcp::reload {
namespace {

// Every generation N has node_name "gen-N" and N probes all targeting "gen-N": a reader that
// saw parts of two generations would find them disagree.
ConfigSnapshot generation(int n) {
  auto c = std::make_shared<config::Config>();
  c->node_name = "gen-" + std::to_string(n);
  for (int i = 0; i < n % 17; ++i) {
    config::ProbeSpec p;
    p.kind = config::ProbeKind::kSyscall;
    p.target = c->node_name;
    c->probes.push_back(p);
  }
  c->metrics_listen = c->node_name + ":1";
  return c;
}

bool consistent(const config::Config& c) {
  const int n = std::stoi(c.node_name.substr(4));
  if (static_cast<int>(c.probes.size()) != n % 17) return false;
  for (const auto& p : c.probes)
    if (p.target != c.node_name) return false;
  return c.metrics_listen == c.node_name + ":1";
}

TEST(ConfigStore, PublishReplacesAndReturnsThePrevious) {
  ConfigStore store(generation(1));
  EXPECT_EQ(store.version(), 0u);
  auto first = store.current();
  auto prev = store.publish(generation(2));
  EXPECT_EQ(prev, first);
  EXPECT_EQ(store.current()->node_name, "gen-2");
  EXPECT_EQ(store.version(), 1u);
  // A reader holding the old snapshot keeps a valid one.
  EXPECT_EQ(first->node_name, "gen-1");
}

TEST(ConfigStore, ConcurrentReadersNeverSeeATornConfig) {
  ConfigStore store(generation(0));
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<long> reads{0};
  std::atomic<bool> reading{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      int last = -1;
      while (!done.load()) {
        auto snap = store.current();
        const int n = std::stoi(snap->node_name.substr(4));
        if (!consistent(*snap) || n < last) ++bad;  // torn, or time went backwards
        last = n;
        ++reads;
        reading = true;
      }
    });
  }
  // A loaded machine may not run a reader before 5000 publishes are done: start publishing
  // once readers are reading, so the test always races them.
  while (!reading.load()) std::this_thread::yield();
  for (int n = 1; n <= 5000; ++n) store.publish(generation(n));
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(store.current()->node_name, "gen-5000");
  EXPECT_EQ(store.version(), 5000u);
}

}  // namespace
}  // namespace mcp::reload
