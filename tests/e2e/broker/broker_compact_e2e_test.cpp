// Compact batches (EventBlock, capability "events-v2") through a real mcp-broker process:
// compact and v1 publishers, compact and v1 subscribers, shared encoded packets, hostile blocks.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/compact_block.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::broker_stats;
using test::compact_batch_message;
using test::compact_block;
using test::hello_message;
using test::publish_messages;
using test::RawSubscriber;
using test::wait_until;

mcp::v1::SubscriptionRequest request(bool compact, const std::string& service = "") {
  mcp::v1::SubscriptionRequest r;
  r.set_compact(compact);
  r.set_service_name(service);
  return r;
}

class BrokerCompactE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("mcp-broker-compact"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void wait_subscribers(const std::string& address, uint32_t n) {
    ASSERT_TRUE(wait_until([&] { return broker_stats(address).subscribers() == n; }, 10s));
  }
  std::filesystem::path dir_;
};

TEST_F(BrokerCompactE2E, CompactBatchesReachCompactSubscribersAsOneSharedBlockAndV1OnesAsSamples) {
  BrokerProcess broker({"--state-dir", (dir_ / "state").string()}, dir_ / "broker.log");
  RawSubscriber c1(broker.address(), request(true));
  RawSubscriber c2(broker.address(), request(true));
  RawSubscriber api(broker.address(), request(true, "api"));
  RawSubscriber v1(broker.address(), request(false));
  wait_subscribers(broker.address(), 4);

  auto hello = hello_message("agent-c");
  hello.mutable_hello()->add_capabilities("events-v2");
  const auto result = publish_messages(
      broker.address(), {hello, compact_batch_message(1, compact_block(10, 0)),
                         compact_batch_message(2, compact_block(10, 10))});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.acks.size(), 2u);
  ASSERT_TRUE(wait_until([&] { return c1.events() == 20 && c2.events() == 20 && v1.events() == 20 &&
                                      api.events() == 10; }, 10s));

  const auto p1 = c1.packets();
  const auto p2 = c2.packets();
  ASSERT_EQ(p1.size(), 2u);
  ASSERT_EQ(p2.size(), 2u);
  std::set<uint64_t> ids;
  std::map<uint64_t, uint64_t> id_of_arg;
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_EQ(p1[i].events(), p2[i].events()) << "unfiltered compact subscribers get the same bytes";
    EXPECT_EQ(p1[i].samples_size(), 0);
    EXPECT_EQ(p1[i].agent_id(), "agent-c");
    mcp::v1::EventBlock b;
    ASSERT_TRUE(b.ParseFromString(p1[i].events()));
    for (const auto& e : b.events()) {
      EXPECT_NE(e.event_id(), 0u);
      ids.insert(e.event_id());
      id_of_arg[e.args(0)] = e.event_id();
    }
  }
  EXPECT_EQ(ids.size(), 20u) << "event ids are set once, unique per event";

  size_t checked = 0;
  for (const auto& p : v1.packets()) {
    EXPECT_TRUE(p.events().empty());
    for (const auto& s : p.samples()) {
      EXPECT_EQ(s.kind(), "syscall");
      EXPECT_EQ(s.probe(), "syscall:getppid");
      EXPECT_EQ(s.comm(), "app");
      EXPECT_EQ(s.service(), s.args(0) % 2 ? "api" : "checkout");
      EXPECT_EQ(s.tags().at("zone"), s.args(0) % 10 % 3 ? "a" : "b");
      EXPECT_EQ(s.agent_id(), "agent-c");
      EXPECT_EQ(s.event_id(), id_of_arg[s.args(0)]) << "the same event id in both forms";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20u);

  for (const auto& p : api.packets()) {
    mcp::v1::EventBlock b;
    ASSERT_TRUE(b.ParseFromString(p.events()));
    for (const auto& e : b.events()) EXPECT_EQ(b.strings(static_cast<int>(e.service())), "api");
  }

  const auto stats = broker_stats(broker.address());
  EXPECT_EQ(stats.batches(), 2u);
  std::map<std::string, uint64_t> per_service;
  for (const auto& p : stats.probes()) {
    EXPECT_EQ(p.probe(), "syscall:getppid");
    per_service[p.service()] = p.events();
    EXPECT_DOUBLE_EQ(p.adjusted_count(), 10.0);
  }
  EXPECT_EQ(per_service["api"], 10u);
  EXPECT_EQ(per_service["checkout"], 10u);

  // From the journal: a late compact subscriber resuming gets the stored block as it was sent.
  RawSubscriber late(broker.address(), [&] {
    auto r = request(true);
    r.set_resume_after(p1[0].offset());  // everything after the first batch
    return r;
  }());
  ASSERT_TRUE(wait_until([&] { return late.events() == 10; }, 10s));
  EXPECT_EQ(late.packets()[0].events(), p1[1].events());
}

TEST_F(BrokerCompactE2E, ReplayedCompactBatchIsAckedAsDuplicateAndDeliveredOnce) {
  BrokerProcess broker({"--state-dir", (dir_ / "state").string()}, dir_ / "broker.log");
  RawSubscriber sub(broker.address(), request(true));
  wait_subscribers(broker.address(), 1);
  const auto batch = compact_batch_message(1, compact_block(8));
  auto first = publish_messages(broker.address(), {hello_message("agent-r"), batch});
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  auto again = publish_messages(broker.address(), {hello_message("agent-r"), batch});
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  ASSERT_EQ(again.acks.size(), 1u);
  EXPECT_TRUE(again.acks[0].duplicate());
  ASSERT_TRUE(wait_until([&] { return sub.events() == 8; }, 10s));
  const auto stats = broker_stats(broker.address());
  EXPECT_EQ(stats.batches(), 1u);
  EXPECT_EQ(stats.duplicate_batches(), 1u);
  // A later batch on the same stream proves the duplicate was not delivered behind our back.
  ASSERT_TRUE(publish_messages(broker.address(), {hello_message("agent-r"),
                                                  compact_batch_message(2, compact_block(1))})
                  .status.ok());
  ASSERT_TRUE(wait_until([&] { return sub.events() == 9; }, 10s));
  EXPECT_EQ(sub.packets().size(), 2u);
}

TEST_F(BrokerCompactE2E, V1BatchReachesACompactSubscriberAsACheckedBlock) {
  BrokerProcess broker({}, dir_ / "broker.log");
  RawSubscriber sub(broker.address(), request(true));
  wait_subscribers(broker.address(), 1);
  ASSERT_TRUE(publish_messages(broker.address(), {hello_message("agent-v1"), test::batch_message(1, 5, 100)})
                  .status.ok());
  ASSERT_TRUE(wait_until([&] { return sub.events() == 5; }, 10s));
  mcp::v1::EventBlock b;
  ASSERT_TRUE(b.ParseFromString(sub.packets()[0].events()));
  ASSERT_GE(b.strings_size(), 2);
  EXPECT_EQ(b.strings(0), "");
  for (int i = 0; i < b.events_size(); ++i) {
    EXPECT_EQ(b.strings(static_cast<int>(b.events(i).service())), "checkout");
    EXPECT_EQ(b.events(i).args(0), 100u + static_cast<uint64_t>(i));
    EXPECT_NE(b.events(i).event_id(), 0u);
  }
}

TEST_F(BrokerCompactE2E, HostileBlocksAndUnknownCapabilitiesAreRefusedWithAReasonAndCounted) {
  BrokerProcess broker({}, dir_ / "broker.log");
  RawSubscriber sub(broker.address(), request(true));
  wait_subscribers(broker.address(), 1);
  auto out_of_range = compact_block(3);
  out_of_range.mutable_events(2)->set_comm(1000);
  auto r = publish_messages(broker.address(), {hello_message("h1"), compact_batch_message(1, out_of_range)});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("comm index 1000 out of range"), std::string::npos)
      << r.status.error_message();
  EXPECT_TRUE(r.acks.empty());

  r = publish_messages(broker.address(), {hello_message("h2"), compact_batch_message(1, compact_block(10001))});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.status.error_message();

  auto both = compact_batch_message(1, compact_block(1));
  both.mutable_batch()->add_samples()->set_threshold(UINT64_MAX);
  r = publish_messages(broker.address(), {hello_message("h3"), both});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << r.status.error_message();

  auto future = hello_message("h4");
  future.mutable_hello()->add_capabilities("events-v9");
  r = publish_messages(broker.address(), {future, compact_batch_message(1, compact_block(1))});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(r.status.error_message().find("events-v9"), std::string::npos) << r.status.error_message();

  // Bytes that are no EventBlock at all.
  auto garbage = compact_batch_message(1, compact_block(0));
  garbage.mutable_batch()->set_events(std::string("\x1a\x7f", 2));
  r = publish_messages(broker.address(), {hello_message("h5"), garbage});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << r.status.error_message();

  auto stats = broker_stats(broker.address());
  EXPECT_EQ(stats.refused_publishes(), 5u);
  EXPECT_EQ(stats.batches(), 0u);
  EXPECT_EQ(sub.events(), 0u);
  // The broker still serves good batches.
  ASSERT_TRUE(publish_messages(broker.address(), {hello_message("h6"), compact_batch_message(1, compact_block(2))})
                  .status.ok());
  ASSERT_TRUE(wait_until([&] { return sub.events() == 2; }, 10s));
}

}  // namespace
}  // namespace mcp
