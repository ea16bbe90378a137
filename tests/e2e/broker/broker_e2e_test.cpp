// End to end on loopback: a real mcp-broker process, the agent's Forwarder and the subscribe
// client in this process, real gRPC on 127.0.0.1 with ports chosen by the broker (port 0).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <set>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "common/error.h"
#include "forward/channel.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "subscribe/subscribe_client.h"
#include "commands/subscribe.h"

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
using test::kEndMarker;
using test::publish_end_marker;

constexpr std::string_view kProbe = "/usr/bin/worker:handle_request";


class BrokerE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("mcp-broker-e2e"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SubscribeOptions subscriber(const std::string& address) { return test::subscribe_options(address); }
  ForwarderOptions forwarder(const std::string& address) {
    return test::forwarder_options({address}, "e2e-agent", 20s);
  }
  std::filesystem::path dir_;
};

TEST_F(BrokerE2E, ALoneEventIsSentByAgeWithoutAFlushOrAFullBatch) {
  BrokerProcess broker({}, dir_ / "broker.log");
  Collector collector(subscriber(broker.address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).subscribers() == 1; }, 5s));
  Forwarder fwd(forwarder(broker.address()));  // batch_count 100: one event never fills it
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).agents_connected() == 1; }, 5s));
  fwd.consume(make_call_event(7));
  // No flush: only the batch age (or the idle-wire linger) can send it.
  EXPECT_TRUE(wait_until([&] { return collector.count() == 1; }, 5s)) << "a lone event waited for a full batch";
  EXPECT_EQ(fwd.stats().queued, 0u);
}

TEST_F(BrokerE2E, SubscriberReceivesExactlyTheForwardedEventsWithTheAgentsFields) {
  BrokerProcess broker({}, dir_ / "broker.log");
  Collector collector(subscriber(broker.address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).subscribers() == 1; }, 5s));

  constexpr uint64_t kN = 5000;
  {
    Forwarder fwd(forwarder(broker.address()));
    for (uint64_t i = 0; i < kN; ++i) fwd.consume(make_call_event(i));
    ASSERT_TRUE(fwd.flush_for(20s));
    EXPECT_EQ(fwd.stats().acked, kN);
    EXPECT_EQ(fwd.stats().dropped_oldest, 0u);
    ASSERT_TRUE(publish_end_marker(fwd, "checkout", 0, 20s));  // stored after all kN: nothing extra may precede it
  }
  ASSERT_TRUE(wait_until([&] { return collector.has_arg(kEndMarker); }, 10s)) << collector.count();
  EXPECT_EQ(collector.count_unmarked(), kN);
  EXPECT_EQ(collector.distinct_unmarked(), kN);

  const mcp::v1::Sample s = collector.first();
  EXPECT_EQ(s.kind(), "uprobe");
  EXPECT_EQ(s.probe(), kProbe);
  EXPECT_EQ(s.pid(), 4242u);
  EXPECT_EQ(s.tid(), 4243u);
  EXPECT_EQ(s.comm(), "worker");
  EXPECT_EQ(s.cgroup_id(), 77u);
  EXPECT_EQ(s.service(), "checkout");
  EXPECT_EQ(s.tags().at("zone"), "a");
  ASSERT_EQ(s.args_size(), 2);
  const Event expected = make_call_event(s.args(0));
  EXPECT_EQ(s.ts_ns(), expected.ts_ns);
  EXPECT_EQ(s.hlc(), expected.hlc);
  EXPECT_EQ(s.ret(), expected.ret);
  EXPECT_EQ(s.duration_ns(), expected.duration_ns);
  EXPECT_EQ(s.threshold(), kQuarter);
  EXPECT_EQ(s.agent_id(), "e2e-agent");

  const auto stats = broker_stats(broker.address());
  ASSERT_EQ(stats.probes_size(), 1);
  EXPECT_EQ(stats.probes(0).events(), kN + 1);  // and the end marker
  EXPECT_DOUBLE_EQ(stats.probes(0).adjusted_count(), 4.0 * (kN + 1));  // weight 4 each
}

TEST_F(BrokerE2E, BrokerKilledMidStreamAndRestartedStillDeliversEachEventOnce) {
  const auto state = dir_ / "state";
  auto broker = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--state-dir", state.string()}, dir_ / "broker1.log");
  const int port = broker->port();
  const std::string address = broker->address();
  Collector collector(subscriber(address));
  ASSERT_TRUE(wait_until([&] { return broker_stats(address).subscribers() == 1; }, 5s));

  constexpr uint64_t kN = 20000;
  auto options = forwarder(address);
  options.spool_dir = dir_ / "spool";
  Forwarder fwd(options);
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      fwd.consume(make_call_event(i));
      if (i % 200 == 199) std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(wait_until([&] { return fwd.stats().acked >= kN / 4; }, 20s));
  const uint64_t errors_before_kill = fwd.stats().forward_errors;
  broker->stop(SIGKILL);  // no goodbye: unacked batches and the journal tail are in flight
  const uint64_t acked_at_kill = fwd.stats().acked;
  // stop() has reaped the process (its port is free: the broker binds with SO_REUSEADDR). The
  // restart waits until both clients have lost their streams, so each reconnects to a new broker
  // rather than racing it. (EXPECT: the producer thread must still be joined.)
  EXPECT_TRUE(wait_until([&] {
    return fwd.stats().forward_errors > errors_before_kill && collector.stats().reconnects >= 1;
  }, 10s)) << "forward errors " << fwd.stats().forward_errors << ", subscriber reconnects "
           << collector.stats().reconnects;
  broker = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--state-dir", state.string()}, dir_ / "broker2.log", port);
  producer.join();
  ASSERT_TRUE(fwd.flush_for(30s)) << "acked " << fwd.stats().acked;
  EXPECT_LT(acked_at_kill, kN) << "the kill was not mid-stream";
  // Stored after every batch of this agent, replays included: once the subscriber has it, any
  // repeat (or the journal replay after its resume) has been delivered.
  ASSERT_TRUE(publish_end_marker(fwd)) << "acked " << fwd.stats().acked;

  ASSERT_TRUE(wait_until([&] { return collector.has_arg(kEndMarker); }, 20s)) << collector.count();
  EXPECT_EQ(collector.count_unmarked(), kN);
  EXPECT_EQ(collector.distinct_unmarked(), kN);
  const auto fs = fwd.stats();
  EXPECT_GE(fs.reconnects, 1u);
  EXPECT_EQ(fs.dropped_oldest, 0u);
  EXPECT_GE(collector.stats().reconnects, 1u);
}

TEST_F(BrokerE2E, StalledSubscriberLosesOnlyItsOwnOldestPacketsAndIsTold) {
  BrokerProcess broker({"--subscriber-queue", "100000"}, dir_ / "broker.log");
  Collector fast(subscriber(broker.address()));
  std::promise<void> release;
  auto slow_options = subscriber(broker.address());
  slow_options.receive_window_bytes = 16 * 1024;  // backpressure reaches the broker quickly
  slow_options.queue_packets = 4;
  Collector slow(slow_options, release.get_future().share());
  struct Release {  // unblocks the slow collector even when an assertion returns early
    std::promise<void>& p;
    bool done = false;
    void now() { if (!done) p.set_value(); done = true; }
    ~Release() { now(); }
  } releaser{release};
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).subscribers() == 2; }, 5s));

  constexpr uint64_t kN = 20000;
  {
    auto options = forwarder(broker.address());
    options.batch_count = 50;
    Forwarder fwd(options);
    for (uint64_t i = 0; i < kN; ++i) fwd.consume(make_call_event(i));
    ASSERT_TRUE(fwd.flush_for(20s));
    EXPECT_EQ(fwd.stats().acked, kN);  // the stalled subscriber did not hold the agent back
    // The end marker, stored after all kN. The slow subscriber's queue drops its oldest packets,
    // so the marker (the newest) is never dropped, and the first packet after drops carries
    // their count: once the marker is in, every delivery and every drop report is.
    ASSERT_TRUE(publish_end_marker(fwd, "checkout", 0, 20s));
  }
  // The fast subscriber gets everything while the slow one is still stalled.
  ASSERT_TRUE(wait_until([&] { return fast.has_arg(kEndMarker); }, 20s)) << fast.count();
  EXPECT_EQ(fast.count_unmarked(), kN);
  EXPECT_EQ(fast.distinct_unmarked(), kN);
  EXPECT_EQ(fast.stats().dropped_samples, 0u);

  releaser.now();
  ASSERT_TRUE(wait_until([&] { return slow.has_arg(kEndMarker); }, 20s))
      << slow.count() << " + " << slow.stats().dropped_samples;
  const auto ss = slow.stats();
  EXPECT_GT(ss.dropped_packets, 0u);
  EXPECT_EQ(slow.count_unmarked() + ss.dropped_samples, kN);  // every loss was reported
  EXPECT_EQ(slow.with_arg(kEndMarker).size(), 1u);
  EXPECT_EQ(slow.distinct(), slow.count());
  EXPECT_GT(broker_stats(broker.address()).subscriber_dropped_packets(), 0u);
}

TEST_F(BrokerE2E, WrongOrMissingTokenIsRefusedAndTheRightOneWorks) {
  std::ofstream(dir_ / "token") << "s3cret\n";
  std::ofstream(dir_ / "wrong") << "guess\n";
  for (const char* name : {"token", "wrong"})  // clients refuse a token file every user can read
    std::filesystem::permissions(dir_ / name, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  BrokerProcess broker({"--token-file", (dir_ / "token").string()}, dir_ / "broker.log");

  for (const std::string token_file : {(dir_ / "wrong").string(), std::string()}) {
    auto o = subscriber(broker.address());
    o.token_file = token_file;
    SubscribeClient client(o);
    try {
      client.run([](const mcp::v1::SamplePacket&) { return true; });
      ADD_FAILURE() << "subscription with token '" << token_file << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    }
  }
  {
    auto o = forwarder(broker.address());
    o.token_file = (dir_ / "wrong").string();
    o.flush_timeout = 1s;
    Forwarder fwd(o);
    fwd.consume(make_call_event(1));
    EXPECT_FALSE(fwd.flush_for(1s));
    EXPECT_EQ(fwd.stats().acked, 0u);
    EXPECT_GE(fwd.stats().forward_errors, 1u);
  }
  EXPECT_TRUE(broker_stats(broker.address(), "s3cret").probes().empty());

  auto o = subscriber(broker.address());
  o.token_file = (dir_ / "token").string();
  Collector collector(o);
  ASSERT_TRUE(wait_until(
      [&] { return broker_stats(broker.address(), "s3cret").subscribers() == 1; }, 5s));
  auto fo = forwarder(broker.address());
  fo.token_file = (dir_ / "token").string();
  Forwarder fwd(fo);
  for (uint64_t i = 0; i < 100; ++i) fwd.consume(make_call_event(i));
  ASSERT_TRUE(fwd.flush_for(10s));
  EXPECT_TRUE(wait_until([&] { return collector.count() == 100; }, 5s)) << collector.count();
}

TEST_F(BrokerE2E, MutualTlsWithCertificatesMadeByOpensslWorksAndRefusesOthers) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI missing";
  const std::string d = dir_.string();
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "cd " + d + " && openssl req -x509 " + key + " -keyout ca.key -out ca.pem -days 1 -subj /CN=mcp-test-ca" +
      " && openssl req " + key + " -keyout server.key -out server.csr -subj /CN=127.0.0.1" +
      " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext" +
      " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext" +
      " && openssl req " + key + " -keyout client.key -out client.csr -subj /CN=e2e-agent" +
      " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 1" +
      " >/dev/null 2>&1";
  ASSERT_EQ(std::system((script + " 2>/dev/null").c_str()), 0) << script;
  BrokerProcess broker({"--tls-ca", d + "/ca.pem", "--tls-cert", d + "/server.pem", "--tls-key",
                        d + "/server.key"},
                       dir_ / "broker.log");
  const TlsFiles mtls{d + "/ca.pem", d + "/client.pem", d + "/client.key"};

  auto so = subscriber(broker.address());
  so.tls = mtls;
  Collector collector(so);
  ASSERT_TRUE(
      wait_until([&] { return broker_stats(broker.address(), "", mtls).subscribers() == 1; }, 10s));
  {
    auto fo = forwarder(broker.address());
    fo.tls = mtls;
    Forwarder fwd(fo);
    for (uint64_t i = 0; i < 500; ++i) fwd.consume(make_call_event(i));
    ASSERT_TRUE(fwd.flush_for(10s));
  }
  EXPECT_TRUE(wait_until([&] { return collector.count() == 500; }, 5s)) << collector.count();

  // A client that trusts the broker but has no certificate, and a plaintext client, are refused.
  for (const TlsFiles& tls : {TlsFiles{d + "/ca.pem", "", ""}, TlsFiles{}}) {
    auto o = subscriber(broker.address());
    o.tls = tls;
    o.reconnect = false;
    SubscribeClient client(o);
    EXPECT_THROW(client.run([](const mcp::v1::SamplePacket&) { return true; }), Error);
    EXPECT_EQ(client.stats().packets, 0u);
  }
}

TEST_F(BrokerE2E, PolicyAppliedThroughTheBrokerReachesConnectedAndLaterAgents) {
  const auto state = dir_ / "state";
  auto broker = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--state-dir", state.string()}, dir_ / "broker1.log");
  std::mutex mu;
  std::vector<std::pair<PolicyUpdate, uint64_t>> received;
  auto options = forwarder(broker->address());
  options.on_policy = [&](const PolicyUpdate& p) {
    std::lock_guard lock(mu);
    received.emplace_back(p, unix_ns());
  };
  {
    Forwarder fwd(options);
    fwd.consume(make_call_event(0));
    ASSERT_TRUE(fwd.flush_for(10s));  // connected and acknowledged

    mcp::v1::Policy policy;
    policy.set_service("checkout");
    policy.set_probe("syscall:read");
    policy.set_sampling_rate(0.25);
    grpc::ClientContext ctx;
    mcp::v1::ApplyPolicyReply reply;
    const uint64_t sent_at = unix_ns();
    ASSERT_TRUE(stub_for(broker->address())->ApplyPolicy(&ctx, policy, &reply).ok());
    EXPECT_EQ(reply.pushed_to_agents(), 1u);
    ASSERT_TRUE(wait_until([&] { std::lock_guard l(mu); return received.size() == 1; }, 5s));
    std::lock_guard lock(mu);
    EXPECT_EQ(received[0].first.service, "checkout");
    EXPECT_EQ(received[0].first.probe, "syscall:read");
    EXPECT_DOUBLE_EQ(received[0].first.sampling_rate, 0.25);
    std::cout << "[ measure ] ApplyPolicy -> agent callback: "
              << (received[0].second - sent_at) / 1000 << " us\n";
  }
  // Graceful stop on SIGTERM, then a restarted broker still knows the policy and pushes it
  // to an agent as soon as it connects.
  const int status = broker->stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  broker = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--state-dir", state.string()}, dir_ / "broker2.log");
  {
    grpc::ClientContext ctx;
    mcp::v1::PolicyList list;
    ASSERT_TRUE(stub_for(broker->address())->ListPolicies(&ctx, {}, &list).ok());
    ASSERT_EQ(list.policies_size(), 1);
    EXPECT_DOUBLE_EQ(list.policies(0).sampling_rate(), 0.25);
  }
  options.brokers = {broker->address()};
  Forwarder later(options);
  EXPECT_TRUE(wait_until([&] { std::lock_guard l(mu); return received.size() == 2; }, 5s));
}

// Issue 31: every new stream gets the broker's whole policy set first (none is a set too), so
// an agent can drop what was removed while it was away; later changes follow one by one.
TEST_F(BrokerE2E, EveryNewAgentStreamGetsTheFullPolicySetFirst) {
  BrokerProcess broker({}, dir_ / "broker.log");
  std::mutex mu;
  std::vector<std::vector<PolicyUpdate>> sets;
  std::vector<PolicyUpdate> singles;
  auto options = forwarder(broker.address());
  options.on_policy_set = [&](const std::vector<PolicyUpdate>& set) {
    std::lock_guard lock(mu);
    sets.push_back(set);
  };
  options.on_policy = [&](const PolicyUpdate& p) {
    std::lock_guard lock(mu);
    singles.push_back(p);
  };
  const auto apply = [&](const std::string& service, double rate) {
    mcp::v1::Policy policy;
    policy.set_service(service);
    policy.set_sampling_rate(rate);
    grpc::ClientContext ctx;
    mcp::v1::ApplyPolicyReply reply;
    ASSERT_TRUE(stub_for(broker.address())->ApplyPolicy(&ctx, policy, &reply).ok());
  };
  {
    Forwarder first(options);
    first.consume(make_call_event(0));
    ASSERT_TRUE(first.flush_for(10s));
    ASSERT_TRUE(wait_until([&] { std::lock_guard l(mu); return sets.size() == 1; }, 5s));
    EXPECT_TRUE(sets[0].empty());
    apply("cart", 0.5);
    ASSERT_TRUE(wait_until([&] { std::lock_guard l(mu); return singles.size() == 1; }, 5s));
    EXPECT_EQ(singles[0].service, "cart");
  }
  apply("checkout", 0.25);
  Forwarder second(options);
  second.consume(make_call_event(1));
  ASSERT_TRUE(second.flush_for(10s));
  ASSERT_TRUE(wait_until([&] { std::lock_guard l(mu); return sets.size() == 2; }, 5s));
  std::lock_guard lock(mu);
  std::set<std::string> services;
  for (const auto& p : sets[1]) services.insert(p.service);
  EXPECT_EQ(services, (std::set<std::string>{"cart", "checkout"}));
  EXPECT_EQ(singles.size(), 1u) << "the set came as single pushes";
}

// Issue 30: a batched subscriber with a linger gets what was stored meanwhile in one message
// (SamplePacket.more: each packet whole, in order), its linger bounded by the broker's
// --subscriber-linger-max; an unbatched one still gets one packet per message; SubscribeClient
// hands its consumer one packet at a time either way.
TEST_F(BrokerE2E, ABatchedSubscriberGetsThePacketsOfItsLingerInOneMessage) {
  BrokerProcess broker({"--subscriber-linger-max", "500ms"}, dir_ / "broker.log");
  auto stub = test::stub_for(broker.address());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  grpc::ClientContext batched_ctx, plain_ctx;
  batched_ctx.set_deadline(deadline);
  plain_ctx.set_deadline(deadline);
  mcp::v1::SubscriptionRequest batched_req;
  batched_req.set_batched(true);
  batched_req.set_linger_ms(60000);  // more than the broker allows: 500 ms
  auto batched = stub->Subscribe(&batched_ctx, batched_req);
  auto plain = stub->Subscribe(&plain_ctx, mcp::v1::SubscriptionRequest());
  auto client_options = subscriber(broker.address());
  client_options.linger = 100ms;
  Collector client(client_options);
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).subscribers() == 3; }, 5s));

  constexpr int kBatches = 20;
  std::vector<mcp::v1::AgentMessage> messages{test::hello_message("batched-agent")};
  for (int i = 1; i <= kBatches; ++i) messages.push_back(test::batch_message(i, 5, static_cast<uint64_t>(i) * 100));
  const auto published = std::chrono::steady_clock::now();
  ASSERT_EQ(test::publish_messages(broker.address(), messages).acks.size(), static_cast<size_t>(kBatches));

  mcp::v1::SamplePacket message;
  int packets = 0, largest = 0;
  uint64_t last_offset = 0;
  std::optional<std::chrono::steady_clock::duration> first_after;
  while (packets < kBatches && batched->Read(&message)) {
    if (!first_after) first_after = std::chrono::steady_clock::now() - published;
    largest = std::max(largest, message.more_size());
    if (message.more_size() == 0) *message.add_more() = message;  // a lone packet is sent as is
    else EXPECT_EQ(message.samples_size(), 0);  // an envelope carries nothing of its own
    for (const auto& p : message.more()) {
      EXPECT_GT(p.offset(), last_offset);
      last_offset = p.offset();
      EXPECT_EQ(p.samples_size(), 5);
      ++packets;
    }
  }
  EXPECT_EQ(packets, kBatches);
  EXPECT_GT(largest, 1) << "the batches stored within the linger shared a message";
  ASSERT_TRUE(first_after.has_value());
  EXPECT_GE(*first_after, 450ms) << "held for the broker's maximum linger";

  int plain_packets = 0;
  while (plain_packets < kBatches && plain->Read(&message)) {
    EXPECT_EQ(message.more_size(), 0);
    EXPECT_EQ(message.samples_size(), 5);
    ++plain_packets;
  }
  EXPECT_EQ(plain_packets, kBatches);

  ASSERT_TRUE(wait_until([&] { return client.count() >= kBatches * 5; }, 10s)) << client.count();
  EXPECT_EQ(client.distinct(), static_cast<size_t>(kBatches * 5));
  EXPECT_EQ(client.stats().packets, static_cast<uint64_t>(kBatches));
  batched_ctx.TryCancel();
  plain_ctx.TryCancel();
}

TEST_F(BrokerE2E, SubscribeCommandPrintsJsonLinesWithTheAgentsFieldNames) {
  BrokerProcess broker({}, dir_ / "broker.log");
  CLI::App app;
  CommandAction action;
  commands::add_subscribe_command(app, action);
  const std::string address = broker.address();
  const std::string out_path = (dir_ / "sub.json").string();
  const char* argv[] = {"mcp-agent", "subscribe", "--broker", address.c_str(), "--max-packets",
                        "1", "--output", out_path.c_str()};
  app.parse(8, const_cast<char**>(argv));
  ASSERT_TRUE(action);

  auto result = std::async(std::launch::async, action);
  const bool subscribed =
      wait_until([&] { return broker_stats(address).subscribers() == 1; }, 5s);
  if (subscribed) {
    auto o = forwarder(address);
    o.batch_count = 3;
    Forwarder fwd(o);
    for (uint64_t i = 0; i < 3; ++i) fwd.consume(make_call_event(i));
    fwd.flush_for(10s);
  }
  const bool finished = result.wait_for(10s) == std::future_status::ready;
  ASSERT_TRUE(subscribed);
  ASSERT_TRUE(finished);
  EXPECT_EQ(result.get(), 0);

  std::ifstream lines(out_path);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    const Event e = make_call_event(j.at("args").at(0).get<uint64_t>());
    EXPECT_EQ(j.at("ts_ns").get<uint64_t>(), e.ts_ns);
    EXPECT_EQ(j.at("ktime_ns").get<uint64_t>(), e.ktime_ns);
    EXPECT_EQ(j.at("hlc").get<uint64_t>(), e.hlc);
    EXPECT_EQ(j.at("kind"), "uprobe");
    EXPECT_EQ(j.at("probe"), kProbe);
    EXPECT_EQ(j.at("pid"), 4242);
    EXPECT_EQ(j.at("tid"), 4243);
    EXPECT_EQ(j.at("comm"), "worker");
    EXPECT_EQ(j.at("cgroup_id"), 77);
    EXPECT_EQ(j.at("cpu"), 1);
    EXPECT_EQ(j.at("ret").get<int64_t>(), e.ret);
    EXPECT_EQ(j.at("duration_ns").get<uint64_t>(), e.duration_ns);
    EXPECT_DOUBLE_EQ(j.at("weight").get<double>(), 4.0);
    EXPECT_EQ(j.at("service"), "checkout");
    EXPECT_EQ(j.at("tags").at("zone"), "a");
    EXPECT_FALSE(j.contains("cuda"));
    ++n;
  }
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace mcp
