// Brokers as stateless front ends over a three-node JetStream cluster (replicas 3), on loopback:
// nats-server and mcp-broker run as child processes, the agent's Forwarder and the subscribe
// client in this process. Each test builds its own cluster in a temp dir.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <nats/nats.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "broker/ingest/downsample.h"
#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/compact_block.h"
#include "common/event.h"
#include "forward/channel.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "../../support/nats_cluster.h"
#include "subscribe/subscribe_client.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::broker_stats;
using test::Collector;
using test::stub_for;
using test::unix_ns;
using test::make_call_event;
using test::kQuarter;
using test::wait_until;
using test::NatsCluster;
using test::batch_message;
using test::hello_message;
using test::publish_messages;
using test::kEndMarker;
using test::publish_end_marker;  // JetStream stores it after all of them; ordered consumers deliver in stream order



// The node that leads the stream's Raft group, asked of the cluster itself.
std::string stream_leader(const std::string& servers) {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  jsStreamInfo* si = nullptr;
  std::string leader;
  if (natsConnection_ConnectTo(&nc, servers.c_str()) == NATS_OK &&
      natsConnection_JetStream(&js, nc, nullptr) == NATS_OK &&
      js_GetStreamInfo(&si, js, "MCP_SAMPLES", nullptr, nullptr) == NATS_OK && si->Cluster &&
      si->Cluster->Leader)
    leader = si->Cluster->Leader;
  if (si) jsStreamInfo_Destroy(si);
  if (js) jsCtx_Destroy(js);
  if (nc) natsConnection_Destroy(nc);
  return leader;
}

class NatsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::nats_server_binary().empty())
      GTEST_SKIP() << "nats-server is not installed (Debian: apt-get install nats-server)";
    dir_ = test::make_temp_dir("mcp-nats-e2e");
    cluster_ = std::make_unique<NatsCluster>(3, dir_);
    a_ = start_broker("a");
    b_ = start_broker("b");
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    cluster_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<BrokerProcess> start_broker(const std::string& name) {
    return std::make_unique<BrokerProcess>(
        std::vector<std::string>{"--backend", cluster_->servers(), "--stream-replicas", "3",
                                 "--log-level", "debug"},
        dir_ / ("broker-" + name + ".log"));
  }

  SubscribeOptions subscriber(const std::string& address) { return test::subscribe_options(address); }
  ForwarderOptions forwarder(std::vector<std::string> brokers) {
    return test::forwarder_options(std::move(brokers), "nats-e2e-agent", 30s);
  }
  // Waits until `collector` has the end marker `marker`: every sample stored before it, repeats
  // and replays included, has been delivered by then. Then exactly `n` others, each once.
  void expect_exactly(const Collector& collector, size_t n, uint64_t marker = kEndMarker) {
    ASSERT_TRUE(wait_until([&] { return collector.has_arg(marker); }, 30s))
        << collector.count() << " of " << n << " and no end marker; " << collector.error();
    EXPECT_EQ(collector.count_unmarked(), n);
    EXPECT_EQ(collector.distinct_unmarked(), n);
  }

  std::filesystem::path dir_;
  std::unique_ptr<NatsCluster> cluster_;
  std::unique_ptr<BrokerProcess> a_;
  std::unique_ptr<BrokerProcess> b_;
};

TEST_F(NatsE2E, SubscriberOnBrokerBReceivesExactlyTheEventsPublishedThroughBrokerA) {
  Collector collector(subscriber(b_->address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 1; }, 10s));

  constexpr uint64_t kN = 5000;
  {
    Forwarder fwd(forwarder({a_->address()}));
    for (uint64_t i = 0; i < kN; ++i) fwd.consume(make_call_event(i));
    ASSERT_TRUE(fwd.flush_for(30s)) << "acked " << fwd.stats().acked;
    EXPECT_EQ(fwd.stats().acked, kN);
    ASSERT_TRUE(publish_end_marker(fwd));
  }
  expect_exactly(collector, kN);
  const auto first = collector.samples().front();
  EXPECT_EQ(first.agent_id(), "nats-e2e-agent");
  EXPECT_EQ(first.service(), "checkout");
  EXPECT_EQ(first.threshold(), kQuarter);
  EXPECT_NE(first.event_id(), 0u);
  const auto stats = broker_stats(a_->address());
  ASSERT_EQ(stats.probes_size(), 1);
  EXPECT_EQ(stats.probes(0).events(), kN + 1);  // and the end marker
  EXPECT_EQ(stats.duplicate_batches(), 0u);
}

TEST_F(NatsE2E, ServiceFilterAndSamplingRateOnBrokerBMatchTheEmbeddedSemantics) {
  auto exact = subscriber(b_->address());
  exact.service = "cart.v2";  // subject token "cart_v2", shared with the service "cart_v2"
  auto half = subscriber(b_->address());
  half.service = "cart.v2";
  half.sampling_rate = 0.5;
  Collector all(subscriber(b_->address()));
  Collector cart(exact);
  Collector cart_half(half);
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 3; }, 10s));

  constexpr uint64_t kN = 3000;  // thirds: checkout, cart.v2, cart_v2
  const auto passes_half = [](const mcp::v1::Sample& s) {
    return broker::keep_at_rate(s.trace_id() != 0 ? s.trace_id() : s.event_id(), 0.5);
  };
  Forwarder fwd(forwarder({a_->address()}));
  const char* services[] = {"checkout", "cart.v2", "cart_v2"};
  for (uint64_t i = 0; i < kN; ++i) fwd.consume(make_call_event(i, services[i % 3]));
  ASSERT_TRUE(fwd.flush_for(30s));
  // End markers of service cart.v2, the one every filter here passes. The rate keeps a marker
  // only when its event id (the broker's, not chosen here) passes the hash: markers follow one at
  // a time until the unthinned `cart` shows one that does, the end marker for cart_half.
  uint64_t half_marker = 0;
  for (uint64_t m = 0; m < 64 && half_marker == 0; ++m) {
    ASSERT_TRUE(publish_end_marker(fwd, "cart.v2", m));
    ASSERT_TRUE(wait_until([&] { return cart.has_arg(kEndMarker + m); }, 30s)) << "end marker " << m;
    const auto copies = cart.with_arg(kEndMarker + m);
    EXPECT_EQ(copies.size(), 1u);
    if (passes_half(copies.front())) half_marker = kEndMarker + m;
  }
  ASSERT_NE(half_marker, 0u) << "64 end markers, none kept at rate 0.5";
  expect_exactly(all, kN);
  expect_exactly(cart, kN / 3);
  for (const auto& s : cart.samples()) EXPECT_EQ(s.service(), "cart.v2");

  // Rate 0.5 keeps exactly the samples whose event id passes the consistent hash, with their
  // probability halved (threshold 2^62 -> 2^61, weight 4 -> 8).
  std::set<uint64_t> expected;
  for (const auto& s : cart.samples())
    if (!test::is_end_marker(s) && passes_half(s)) expected.insert(s.args(0));
  ASSERT_TRUE(wait_until([&] { return cart_half.has_arg(half_marker); }, 30s)) << cart_half.count();
  std::set<uint64_t> got;
  for (const auto& s : cart_half.samples()) {
    if (!test::is_end_marker(s)) got.insert(s.args(0));
    EXPECT_EQ(s.threshold(), kQuarter / 2);
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(cart_half.count_unmarked(), expected.size());
  EXPECT_GT(expected.size(), kN / 3 / 4);  // the hash is not degenerate
}

// One Publish stream with a hand-made batch, as an agent replaying after a lost ack would send it.
mcp::v1::Ack publish_batch(const std::string& address, const std::string& agent, uint64_t sequence,
                           uint64_t first_arg, int samples) {
  auto stub = stub_for(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 15s);
  auto stream = stub->Publish(&ctx);
  mcp::v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(agent);
  stream->Write(hello);
  mcp::v1::AgentMessage m;
  m.mutable_batch()->set_sequence(sequence);
  for (int i = 0; i < samples; ++i) {
    auto* s = m.mutable_batch()->add_samples();
    s->set_service("checkout");
    s->set_threshold(UINT64_MAX);  // 0 is refused: its weight would be infinite
    s->add_args(first_arg + static_cast<uint64_t>(i));
  }
  stream->Write(m);
  mcp::v1::BrokerMessage reply;
  mcp::v1::Ack ack;
  while (stream->Read(&reply)) {
    if (reply.has_ack()) {
      ack = reply.ack();
      break;
    }
  }
  ctx.TryCancel();
  stream->Finish();
  return ack;
}

// The JetStream backend refuses what the embedded one refuses (issue 14, items 8-10), and
// nothing refused reaches the stream or Stats.
TEST_F(NatsE2E, BadBatchesAndPoliciesAreRefusedBeforeJetStream) {
  auto zero_threshold = test::batch_message(3, 2);
  zero_threshold.mutable_batch()->mutable_samples(0)->set_threshold(0);
  auto refused = test::publish_messages(a_->address(), {test::hello_message("bad"), zero_threshold});
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(refused.acks.empty());
  mcp::v1::AgentMessage flood;
  flood.mutable_batch()->set_sequence(4);
  for (int i = 0; i < 20000; ++i) flood.mutable_batch()->add_samples()->set_threshold(UINT64_MAX);
  refused = test::publish_messages(a_->address(), {test::hello_message("bad"), flood});
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(refused.acks.empty());
  EXPECT_EQ(broker_stats(a_->address()).batches(), 0u);

  mcp::v1::Policy nan;
  nan.set_sampling_rate(std::numeric_limits<double>::quiet_NaN());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  mcp::v1::ApplyPolicyReply reply;
  EXPECT_EQ(stub_for(a_->address())->ApplyPolicy(&ctx, nan, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const auto ok = test::publish_messages(a_->address(), {test::hello_message("good"), test::batch_message(5, 3)});
  ASSERT_EQ(ok.acks.size(), 1u) << ok.status.error_message();
  EXPECT_EQ(broker_stats(a_->address()).batches(), 1u);
}

TEST_F(NatsE2E, BatchReplayedThroughTheOtherBrokerIsAckedAsDuplicateAndDeliveredOnce) {
  Collector collector(subscriber(b_->address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 1; }, 10s));
  const mcp::v1::Ack first = publish_batch(a_->address(), "replayer", 7, 0, 10);
  EXPECT_EQ(first.sequence(), 7u);
  EXPECT_FALSE(first.duplicate());
  const mcp::v1::Ack replay = publish_batch(b_->address(), "replayer", 7, 0, 10);
  EXPECT_EQ(replay.sequence(), 7u);
  EXPECT_TRUE(replay.duplicate());
  const mcp::v1::Ack other_agent = publish_batch(b_->address(), "someone-else", 7, 100, 10);
  EXPECT_FALSE(other_agent.duplicate());
  // The end marker: the replayer's next batch, through B as the replay went. Every batch above
  // was acknowledged (stored, or refused as a duplicate) before it was sent, so the stream holds
  // it after all of them and the subscriber's ordered consumer delivers it last.
  const mcp::v1::Ack marker = publish_batch(b_->address(), "replayer", 8, kEndMarker, 1);
  EXPECT_EQ(marker.sequence(), 8u);
  EXPECT_FALSE(marker.duplicate());
  expect_exactly(collector, 20);  // the replay is not delivered; the other agent's batch is
  EXPECT_EQ(broker_stats(b_->address()).duplicate_batches(), 1u);
}

// Compact batches (events-v2) through JetStream: a batch of two services is two messages, each
// a block of its own; compact subscribers on the other broker get blocks, v1 ones samples, and a
// replay through the other broker is a duplicate.
// Issue 29: with JetStream the credential binding did not apply, so a holder of another publish
// token could publish as (and pre-empt the message ids of) any agent. The binding lives in a
// bucket every broker shares: an id bound through A is refused to another token on B; it goes
// once unrefreshed for --agent-expiry (the bucket's TTL, in real time).
TEST_F(NatsE2E, AnAgentIdIsBoundToItsFirstCredentialAcrossBrokersUntilItExpires) {
  const auto tokens = dir_ / "tokens";
  std::ofstream(tokens) << "publish owner-token\npublish other-token\n";
  auto broker = [&](const std::string& name) {
    return std::make_unique<BrokerProcess>(
        std::vector<std::string>{"--backend", cluster_->servers(), "--stream-replicas", "3", "--token-file",
                                 tokens.string(), "--agent-bucket", "mcp_agents_expiry_test", "--agent-expiry", "3s"},
        dir_ / ("broker-" + name + ".log"));
  };
  auto a = broker("ta");
  auto b = broker("tb");
  auto owner = publish_messages(a->address(), {hello_message("node-x"), batch_message(1, 1)}, "owner-token");
  ASSERT_EQ(owner.acks.size(), 1u) << owner.status.error_message();
  auto forged = publish_messages(b->address(), {hello_message("node-x"), batch_message(2, 1)}, "other-token");
  EXPECT_EQ(forged.status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.status.error_message();
  EXPECT_TRUE(forged.acks.empty());
  auto again = publish_messages(b->address(), {hello_message("node-x"), batch_message(2, 1)}, "owner-token");
  ASSERT_EQ(again.acks.size(), 1u) << again.status.error_message();
  EXPECT_FALSE(again.acks[0].duplicate());
  // Unrefreshed past the expiry (and past this broker's cache, a quarter of it), the id is free.
  ASSERT_TRUE(wait_until([&] {
    auto claimed = publish_messages(b->address(), {hello_message("node-x"), batch_message(3, 1)}, "other-token");
    return claimed.status.ok() && claimed.acks.size() == 1;
  }, 15s)) << "the binding never expired";
}

// Issue 30: the embedded broker's sequence window (dedup_table.h), shared through the agent
// bucket: a mark A stored lets B take what follows it, and refuses at B the jump A refuses.
// Without the shared mark B would refuse 2^32 + 5 as a first sequence.
TEST_F(NatsE2E, TheSequenceWindowIsSharedByEveryBrokerOfTheCluster) {
  constexpr uint64_t kIncarnation = 7;
  constexpr uint64_t kMark = uint64_t{1} << 31;
  auto first = publish_messages(a_->address(), {hello_message("node-w", kIncarnation), batch_message(kMark, 1)});
  ASSERT_EQ(first.acks.size(), 1u) << first.status.error_message();
  for (const auto* broker : {a_.get(), b_.get()}) {
    auto jump = publish_messages(broker->address(),
                                 {hello_message("node-w", kIncarnation), batch_message(kMark + (uint64_t{1} << 32) + 1, 1)});
    EXPECT_EQ(jump.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << jump.status.error_message();
    EXPECT_NE(jump.status.error_message().find("sequence"), std::string::npos) << jump.status.error_message();
    EXPECT_TRUE(jump.acks.empty());
    auto forged = publish_messages(broker->address(), {hello_message("node-f", kIncarnation), batch_message(UINT64_MAX, 1)});
    EXPECT_EQ(forged.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << forged.status.error_message();
    EXPECT_TRUE(forged.acks.empty()) << "a forged first sequence was acked";
  }
  auto next = publish_messages(b_->address(),
                               {hello_message("node-w", kIncarnation), batch_message((uint64_t{1} << 32) + 5, 1)});
  ASSERT_EQ(next.acks.size(), 1u) << next.status.error_message();
  EXPECT_FALSE(next.acks[0].duplicate());
}

TEST_F(NatsE2E, CompactBatchThroughAReachesCompactAndV1SubscribersOnBOnce) {
  mcp::v1::SubscriptionRequest compact_req;
  compact_req.set_compact(true);
  mcp::v1::SubscriptionRequest api_req = compact_req;
  api_req.set_service_name("api");
  test::RawSubscriber compact(b_->address(), compact_req);
  test::RawSubscriber api(b_->address(), api_req);
  test::RawSubscriber v1(b_->address(), mcp::v1::SubscriptionRequest());
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 3; }, 10s));
  auto hello = test::hello_message("compact-agent");
  hello.mutable_hello()->add_capabilities("events-v2");
  const auto batch = test::compact_batch_message(3, test::compact_block(10, 0));
  auto r = test::publish_messages(a_->address(), {hello, batch});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.acks.size(), 1u);
  EXPECT_FALSE(r.acks[0].duplicate());
  r = test::publish_messages(b_->address(), {hello, batch});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.acks.size(), 1u);
  EXPECT_TRUE(r.acks[0].duplicate());
  ASSERT_TRUE(wait_until([&] { return compact.events() == 10 && api.events() == 5 && v1.events() == 10; }, 30s))
      << compact.events() << " " << api.events() << " " << v1.events();
  std::set<uint64_t> ids;
  for (const auto& p : compact.packets()) {
    mcp::v1::EventBlock b;
    ASSERT_TRUE(b.ParseFromString(p.events()));
    for (const auto& e : b.events()) ids.insert(e.event_id());
  }
  for (const auto& p : v1.packets())
    for (const auto& s : p.samples()) {
      EXPECT_EQ(s.probe(), "syscall:getppid");
      EXPECT_EQ(s.agent_id(), "compact-agent");
      EXPECT_TRUE(ids.count(s.event_id())) << "the same event ids in both forms";
    }
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(broker_stats(a_->address()).probes_size(), 2);
}

TEST_F(NatsE2E, StreamLeaderKilledMidStreamStillDeliversExactlyN) {
  Collector collector(subscriber(b_->address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 1; }, 10s));
  const size_t victim = cluster_->index_of(stream_leader(cluster_->servers()));
  ASSERT_LT(victim, cluster_->size()) << "no stream leader reported";

  constexpr uint64_t kN = 20000;
  Forwarder fwd(forwarder({a_->address()}));
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      fwd.consume(make_call_event(i));
      if (i % 100 == 99) std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(wait_until([&] { return fwd.stats().acked >= kN / 4; }, 30s));
  cluster_->kill(victim, SIGKILL);
  const uint64_t acked_at_kill = fwd.stats().acked;
  producer.join();
  ASSERT_TRUE(fwd.flush_for(45s)) << "acked " << fwd.stats().acked;
  EXPECT_LT(acked_at_kill, kN) << "the kill was not mid-stream";
  ASSERT_TRUE(publish_end_marker(fwd));
  expect_exactly(collector, kN);
  std::cout << "[ measure ] killed " << cluster_->name(victim) << " at " << acked_at_kill
            << " acked; forwarder reconnects " << fwd.stats().reconnects << "\n";
}

TEST_F(NatsE2E, BrokerAKilledMidStreamAgentFailsOverToBWithNothingLostOrRepeated) {
  Collector collector(subscriber(b_->address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 1; }, 10s));

  constexpr uint64_t kN = 20000;
  auto options = forwarder({a_->address(), b_->address()});
  options.spool_dir = dir_ / "spool";
  Forwarder fwd(options);
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      fwd.consume(make_call_event(i));
      if (i % 100 == 99) std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(wait_until([&] { return fwd.stats().acked >= kN / 4; }, 30s));
  a_->stop(SIGKILL);  // unacked batches are in flight, some already stored in JetStream
  const uint64_t acked_at_kill = fwd.stats().acked;
  producer.join();
  ASSERT_TRUE(fwd.flush_for(45s)) << "acked " << fwd.stats().acked;
  EXPECT_LT(acked_at_kill, kN) << "the kill was not mid-stream";
  ASSERT_TRUE(publish_end_marker(fwd));  // through B, after every replay B acknowledged
  expect_exactly(collector, kN);
  const auto fs = fwd.stats();
  EXPECT_GE(fs.reconnects, 1u);
  EXPECT_EQ(fs.broker, b_->address());
  EXPECT_EQ(fs.dropped_oldest, 0u);
  std::cout << "[ measure ] duplicates dropped by JetStream via broker B: "
            << broker_stats(b_->address()).duplicate_batches() << " batches\n";
}

TEST_F(NatsE2E, SubscriberWhoseBrokerIsKilledResumesOnTheOtherWithoutGapOrRepeat) {
  // Offsets are stream sequences, the same through every broker, so resume_after carries over.
  auto options = subscriber(b_->address());
  options.brokers = {b_->address(), a_->address()};
  Collector collector(options);
  ASSERT_TRUE(wait_until([&] { return broker_stats(b_->address()).subscribers() == 1; }, 10s));

  constexpr uint64_t kN = 20000;
  Forwarder fwd(forwarder({a_->address()}));
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      fwd.consume(make_call_event(i));
      if (i % 100 == 99) std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(wait_until([&] { return collector.count() >= kN / 4; }, 30s));
  b_->stop(SIGKILL);
  const size_t received_at_kill = collector.count();
  producer.join();
  ASSERT_TRUE(fwd.flush_for(30s));
  EXPECT_LT(received_at_kill, kN) << "the kill was not mid-stream";
  ASSERT_TRUE(publish_end_marker(fwd));
  expect_exactly(collector, kN);
}

TEST_F(NatsE2E, PolicyAppliedOnBReachesTheAgentConnectedToA) {
  std::mutex mu;
  std::vector<std::pair<PolicyUpdate, uint64_t>> received;
  auto options = forwarder({a_->address()});
  options.on_policy = [&](const PolicyUpdate& p) {
    std::lock_guard lock(mu);
    received.emplace_back(p, unix_ns());
  };
  Forwarder fwd(options);
  fwd.consume(make_call_event(0));
  ASSERT_TRUE(fwd.flush_for(20s));  // connected to A and acknowledged
  ASSERT_TRUE(wait_until([&] { return broker_stats(a_->address()).agents_connected() == 1; }, 5s));

  mcp::v1::Policy policy;
  policy.set_service("checkout");
  policy.set_probe("syscall:read");
  policy.set_sampling_rate(0.25);
  grpc::ClientContext ctx;
  mcp::v1::ApplyPolicyReply reply;
  const uint64_t sent_at = unix_ns();
  const auto status = stub_for(b_->address())->ApplyPolicy(&ctx, policy, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.pushed_to_agents(), 0u);  // B has no agents; A pushes on its own
  EXPECT_DOUBLE_EQ(reply.stored().sampling_rate(), 0.25);
  ASSERT_TRUE(wait_until([&] { std::lock_guard l(mu); return !received.empty(); }, 10s));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(received[0].first.service, "checkout");
    EXPECT_EQ(received[0].first.probe, "syscall:read");
    EXPECT_DOUBLE_EQ(received[0].first.sampling_rate, 0.25);
    std::cout << "[ measure ] ApplyPolicy on B -> callback of the agent on A: "
              << (received[0].second - sent_at) / 1000 << " us\n";
  }
  // A lists it too, and an agent that connects to A later gets it on connect.
  grpc::ClientContext list_ctx;
  mcp::v1::PolicyList list;
  ASSERT_TRUE(stub_for(a_->address())->ListPolicies(&list_ctx, {}, &list).ok());
  ASSERT_EQ(list.policies_size(), 1);
  EXPECT_EQ(list.policies(0).probe(), "syscall:read");

  std::atomic<int> later_got{0};
  auto later_options = forwarder({a_->address()});
  later_options.agent_id = "later-agent";
  later_options.on_policy = [&](const PolicyUpdate& p) {
    if (p.probe == "syscall:read" && p.sampling_rate == 0.25) ++later_got;
  };
  Forwarder later(later_options);
  EXPECT_TRUE(wait_until([&] { return later_got.load() == 1; }, 10s));
}

}  // namespace
}  // namespace mcp
