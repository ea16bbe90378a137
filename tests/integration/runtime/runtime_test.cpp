// The Runtime (agent/runtime/runtime.h) in-process, on real BPF: a uprobe on this build's
// own workload binary (no other process runs that file), so every event is one the test caused.
// Covers the fan-out to every sink, the one shutdown sequence (detach before the last
// drain) and the exit code from the sinks' reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "../../support/run_command.h"
#include "loader/target_resolver.h"
#include "runtime/runtime.h"

namespace {

namespace fs = std::filesystem;
using mcp::Event;
using mcp::runtime::Runtime;
using mcp::runtime::RuntimeSpec;

// Collects events; its drain() and report() are what a test makes them.
struct TestSink : mcp::EventSink {
  std::vector<Event> events;
  std::function<void()> on_drain;
  mcp::SinkReport verdict;
  void consume(const Event& e) override { events.push_back(e); }
  bool drain(std::chrono::milliseconds, const std::function<bool()>&) override {
    if (on_drain) on_drain();
    return true;
  }
  mcp::SinkReport report() const override { return verdict; }
};

const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

RuntimeSpec this_process() { return RuntimeSpec{}; }

void call_work(int n) {
  const auto r = mcp::test::run_command({kWorkload, "calls", std::to_string(n)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

void attach_work(Runtime& rt) {
  rt.session().add_uprobe(mcp::loader::resolve_uprobe(kWorkload + ":mcp_work", 0), false, -1, mcp::loader::ProbeConfig{});
}

// Attaches mcp_work, starts, calls it `n` times on the first poll and stops; returns run()'s code.
int run_calls(Runtime& rt, int n) {
  attach_work(rt);
  rt.start();
  bool called = false;
  mcp::runtime::RunHooks hooks;
  hooks.each_poll = [&] {
    if (called) return;
    called = true;
    call_work(n);
    rt.request_stop();
  };
  return rt.run(hooks);
}

TEST(Runtime, EveryKeptEventReachesEverySink) {
  MCP_REQUIRE_BPF();
  const fs::path out = fs::temp_directory_path() / ("mcp-runtime-" + std::to_string(getpid()) + ".json");
  auto spec = this_process();
  spec.stream = mcp::runtime::StreamSpec{"json", out.string()};
  auto sink = std::make_shared<TestSink>();
  spec.sinks.push_back(sink);
  Runtime rt(std::move(spec));
  ASSERT_EQ(run_calls(rt, 500), 0);
  EXPECT_EQ(sink->events.size(), 500u);
  for (const auto& e : sink->events) EXPECT_NE(e.probe.find(":mcp_work"), std::string::npos) << e.probe;
  std::ifstream in(out);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) lines += line.find(":mcp_work\"") != std::string::npos;
  EXPECT_EQ(lines, 500u) << "the file sink is written and flushed before run() returns";
  const auto id = rt.session().probes().at(0).id;
  EXPECT_EQ(rt.session().counters(id).kept, 500u);
  fs::remove(out);
}

TEST(Runtime, MaxEventsEndsTheRunAfterThatManyEvents) {
  MCP_REQUIRE_BPF();
  auto spec = this_process();
  spec.max_events = 10;
  auto sink = std::make_shared<TestSink>();
  spec.sinks.push_back(sink);
  Runtime rt(std::move(spec));
  attach_work(rt);
  rt.start();
  mcp::runtime::RunHooks hooks;
  hooks.each_poll = [] { call_work(100); };  // no stop request: max_events must end it
  EXPECT_EQ(rt.run(hooks), 0);
  EXPECT_EQ(sink->events.size(), 10u);
}

// The shutdown sequence detaches before the sinks' last drain: a call made while a sink
// drains is neither seen nor kept, so nothing is kept that no sink can receive.
TEST(Runtime, ProbesAreDetachedBeforeTheSinksDrain) {
  MCP_REQUIRE_BPF();
  auto spec = this_process();
  auto sink = std::make_shared<TestSink>();
  spec.sinks.push_back(sink);
  Runtime rt(std::move(spec));
  uint64_t seen_at_drain = 0, seen_after_calls = 0;
  sink->on_drain = [&] {
    const auto id = rt.session().probes().at(0).id;
    seen_at_drain = rt.session().counters(id).seen;
    call_work(100);
    seen_after_calls = rt.session().counters(id).seen;
  };
  ASSERT_EQ(run_calls(rt, 50), 0);
  EXPECT_EQ(seen_at_drain, 50u);
  EXPECT_EQ(seen_after_calls, seen_at_drain) << "a probe was still attached during the last drain";
  EXPECT_EQ(sink->events.size(), 50u);
}

TEST(Runtime, EventsASinkLostFailTheRun) {
  MCP_REQUIRE_BPF();
  auto spec = this_process();
  auto sink = std::make_shared<TestSink>();
  sink->verdict = {"", "7 events undelivered: 7 lost", 7, 0};
  spec.sinks.push_back(sink);
  Runtime rt(std::move(spec));
  EXPECT_EQ(run_calls(rt, 1), 1);
}

TEST(Runtime, EventsKeptOnDiskFailTheRunUnlessTheSpecCountsThemDelivered) {
  MCP_REQUIRE_BPF();
  for (const bool delivered : {false, true}) {
    auto spec = this_process();
    spec.kept_on_disk_is_delivered = delivered;
    auto sink = std::make_shared<TestSink>();
    sink->verdict = {"", "3 events undelivered: 3 kept in the spool", 0, 3};
    spec.sinks.push_back(sink);
    Runtime rt(std::move(spec));
    EXPECT_EQ(run_calls(rt, 1), delivered ? 0 : 1) << "kept_on_disk_is_delivered " << delivered;
  }
}

}  // namespace
