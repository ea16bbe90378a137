// Issue 30: routing across clusters on NATS itself. Cluster A (JetStream domain "a") accepts a
// leaf node; cluster B (domain "b") connects to it through a TcpProxy the test can cut, with the
// sample and key-value subjects denied on the link so each cluster keeps its own stream, policies
// and agent bindings. B's broker is started with --nats-source a=checkout: JetStream copies A's
// checkout events into B's stream (a stream source over A's API, "$JS.a.API"), and B's
// subscribers get them from there. nats-server and mcp-broker run as child processes.
#include <gtest/gtest.h>

#include <thread>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/nats_cluster.h"
#include "../../support/tcp_proxy.h"
#include "forward/forwarder.h"
#include "subscribe/subscribe_client.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::Collector;
using test::kEndMarker;
using test::publish_end_marker;
using test::make_call_event;
using test::wait_until;

class CrossClusterE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::nats_server_binary().empty())
      GTEST_SKIP() << "nats-server is not installed (Debian: apt-get install nats-server)";
    dir_ = test::make_temp_dir("mcp-nats-leaf-e2e");
    const int leaf_port = test::free_ports(1).front();
    link_ = std::make_unique<test::TcpProxy>(leaf_port);
    // A advertises the proxy as its leaf address: B, told of A's own, would go around it.
    a_ = std::make_unique<test::NatsCluster>(
        1, dir_ / "a",
        test::NatsClusterOptions{"a", "a",
                                 "leafnodes {\n  listen: 127.0.0.1:" + std::to_string(leaf_port) +
                                     "\n  advertise: 127.0.0.1:" + std::to_string(link_->port()) + "\n}\n"});
    b_ = std::make_unique<test::NatsCluster>(
        1, dir_ / "b",
        test::NatsClusterOptions{
            "b", "b",
            "leafnodes {\n  reconnect: 1\n  remotes: [ {\n    url: \"nats-leaf://127.0.0.1:" +
                std::to_string(link_->port()) +
                "\"\n    deny_imports: [\"mcp.>\", \"$KV.>\"]\n    deny_exports: [\"mcp.>\", \"$KV.>\"]\n  } ]\n}\n"});
    ASSERT_TRUE(wait_until([&] { return link_->connections() > 0; }, 20s)) << b_->log(0);
    broker_a_ = std::make_unique<BrokerProcess>(
        std::vector<std::string>{"--backend", a_->servers(), "--stream-replicas", "1"}, dir_ / "broker-a.log");
    broker_b_ = std::make_unique<BrokerProcess>(
        std::vector<std::string>{"--backend", b_->servers(), "--stream-replicas", "1", "--nats-source", "a=checkout"},
        dir_ / "broker-b.log");
  }
  void TearDown() override {
    broker_a_.reset();
    broker_b_.reset();
    b_.reset();
    link_.reset();
    a_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  SubscribeOptions subscriber(const std::string& address, const std::string& service) {
    return test::subscribe_options(address, service);
  }
  ForwarderOptions forwarder(const std::string& address) {
    return test::forwarder_options({address}, "leaf-e2e-agent", 30s);
  }

  std::filesystem::path dir_;
  std::unique_ptr<test::NatsCluster> a_;
  std::unique_ptr<test::TcpProxy> link_;
  std::unique_ptr<test::NatsCluster> b_;
  std::unique_ptr<BrokerProcess> broker_a_;
  std::unique_ptr<BrokerProcess> broker_b_;
};

// Agents publish to A under load; the link is cut for 30 s and restored. B's subscriber gets
// every checkout event exactly once (none of the other service), A's subscriber all of both,
// and what A stored while the link was down reaches B after it.
TEST_F(CrossClusterE2E, ALeafLinkCutForThirtySecondsUnderLoadStillDeliversEachEventToBOnce) {
  Collector at_b(subscriber(broker_b_->address(), "checkout"));
  Collector all_at_b(subscriber(broker_b_->address(), ""));
  Collector at_a(subscriber(broker_a_->address(), ""));
  ASSERT_TRUE(wait_until([&] { return test::broker_stats(broker_b_->address()).subscribers() == 2; }, 10s));
  ASSERT_TRUE(wait_until([&] { return test::broker_stats(broker_a_->address()).subscribers() == 1; }, 10s));

  constexpr uint64_t kN = 6000;  // checkout events; as many of "cart" interleaved
  Forwarder fwd(forwarder(broker_a_->address()));
  std::atomic<uint64_t> sent{0};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      fwd.consume(make_call_event(i, "checkout"));
      fwd.consume(make_call_event(kN + i, "cart"));
      sent = i + 1;
      if (i % 100 == 99) std::this_thread::sleep_for(50ms);  // ~4k events/s for ~3 s, then more
    }
  });
  ASSERT_TRUE(wait_until([&] { return at_b.count() >= 500; }, 30s)) << at_b.count() << "; " << at_b.error();
  link_->cut();
  const uint64_t at_cut = at_b.count();
  const auto cut_at = std::chrono::steady_clock::now();
  // Load goes on while the link is down: A keeps storing, B gets nothing more.
  ASSERT_TRUE(wait_until([&] { return at_a.count() >= at_cut + 2000; }, 30s)) << at_a.count();
  std::this_thread::sleep_until(cut_at + 30s);
  EXPECT_LE(at_b.count(), at_cut + 200) << "B got A's events with the link cut";  // a batch in flight
  link_->restore();
  producer.join();
  ASSERT_TRUE(fwd.flush_for(30s));
  // The end marker takes the events' own path: this agent, broker A, A's stream (after every
  // event, all acknowledged), then as a checkout event through the source into B's stream, which
  // copies A's messages in A's order. A repeat, or a cart event the source let through, would be
  // stored before it in B's stream, so each subscriber that has it has had everything it counts.
  ASSERT_TRUE(publish_end_marker(fwd));

  ASSERT_TRUE(wait_until([&] { return at_b.has_arg(kEndMarker); }, 60s)) << at_b.count() << " of " << kN;
  ASSERT_TRUE(wait_until([&] { return all_at_b.has_arg(kEndMarker); }, 30s)) << all_at_b.count();
  ASSERT_TRUE(wait_until([&] { return at_a.has_arg(kEndMarker); }, 30s)) << at_a.count();
  EXPECT_EQ(at_b.count_unmarked(), kN);
  EXPECT_EQ(at_b.distinct_unmarked(), kN);
  EXPECT_EQ(all_at_b.count_unmarked(), kN) << "only the sourced service crosses";
  for (const auto& s : all_at_b.samples()) EXPECT_EQ(s.service(), "checkout");
  EXPECT_EQ(at_a.count_unmarked(), 2 * kN);
  EXPECT_EQ(at_a.distinct_unmarked(), 2 * kN);
}

// What B's own agents publish stays in B: the link carries only what B sources.
TEST_F(CrossClusterE2E, EventsPublishedInBStayInB) {
  Collector at_a(subscriber(broker_a_->address(), ""));
  Collector at_b(subscriber(broker_b_->address(), ""));
  ASSERT_TRUE(wait_until([&] { return test::broker_stats(broker_a_->address()).subscribers() == 1; }, 10s));
  ASSERT_TRUE(wait_until([&] { return test::broker_stats(broker_b_->address()).subscribers() == 1; }, 10s));
  Forwarder fwd(forwarder(broker_b_->address()));
  for (uint64_t i = 0; i < 300; ++i) fwd.consume(make_call_event(i, "checkout"));
  ASSERT_TRUE(fwd.flush_for(30s));
  // B's end marker, through the same agent and broker: stored in B's stream after the 300.
  ASSERT_TRUE(publish_end_marker(fwd));
  ASSERT_TRUE(wait_until([&] { return at_b.has_arg(kEndMarker); }, 30s)) << at_b.count();
  EXPECT_EQ(at_b.count_unmarked(), 300u);
  EXPECT_EQ(at_b.distinct_unmarked(), 300u);
  // A marker through A shows A's subscriber is live and caught up with A's stream. What A must
  // not get has no path to A in a passing run, so no end marker can close this wait: B's own
  // marker would follow B's samples across the link only if they crossed. Its absence is waited
  // for, bounded (no ordering here bounds the link's transit), after A's marker, which was sent
  // only once at_b had B's.
  Forwarder marker(forwarder(broker_a_->address()));
  ASSERT_TRUE(publish_end_marker(marker, "marker", 1));
  ASSERT_TRUE(wait_until([&] { return at_a.has_arg(kEndMarker + 1); }, 30s)) << at_a.count();
  EXPECT_FALSE(wait_until([&] { return at_a.has_arg(kEndMarker); }, 500ms)) << "B's end marker crossed to A";
  EXPECT_EQ(at_a.count(), 1u);
  EXPECT_EQ(at_b.count(), 301u);  // the 300 and B's end marker: A's marker stays in A
}

}  // namespace
}  // namespace mcp
