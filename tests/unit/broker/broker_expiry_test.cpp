// Agent expiry (issue 29) of an in-process Broker over real gRPC on loopback (port 0), with the
// broker's clock (BrokerOptions::clock) a SimulatedClockSource: time passes when the test
// advances it, so "unseen for longer than --agent-expiry" takes no real seconds to show.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "broker/net/access.h"
#include "broker/broker.h"
#include "clock/clock_source.h"
#include "../../support/broker_client.h"
#include "../../support/broker_process.h"

namespace mcp::broker {
namespace {

using namespace std::chrono_literals;
using test::batch_message;
using test::hello_message;
using test::publish_messages;

constexpr int64_t kNsPerMs = 1'000'000;

class BrokerExpiry : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_temp_dir("mcp-broker-expiry");
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("expiry-test", log_));
  }
  void TearDown() override {
    spdlog::set_default_logger(previous_);
    std::filesystem::remove_all(dir_);
  }

  // What the old e2e test gave mcp-broker: three publish tokens, a state dir, --agent-expiry 2s.
  BrokerOptions options() const {
    BrokerOptions o;
    o.listen = "127.0.0.1:0";
    o.tokens = {{"old-token", kPublish}, {"new-token", kPublish}, {"other-token", kPublish}};
    o.state_dir = dir_ / "state";
    o.agent_expiry = 2s;
    o.clock = clock_;
    return o;
  }
  static std::string address(const Broker& broker) { return "127.0.0.1:" + std::to_string(broker.port()); }
  // What the broker logged since the previous call.
  std::string take_log() {
    std::string text;
    for (const auto& line : log_->last_formatted()) text += line;
    log_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("expiry-test", log_));
    return text;
  }

  std::filesystem::path dir_;
  // No cost per read: the broker's realtime is exactly the start plus what the test advanced.
  std::shared_ptr<clock::SimulatedClockSource> clock_ =
      std::make_shared<clock::SimulatedClockSource>(clock::SimulatedClockOptions{.read_cost_ns = 0});
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  std::shared_ptr<spdlog::logger> previous_;
};

// Issue 29: agent ids lived forever (10,000 nodes that came and went stayed bound). An id unseen
// for longer than the expiry, on the broker's clock, is forgotten at the next start: its binding
// no longer refuses another credential, its mark no longer makes a batch a duplicate; an id seen
// within the period stays bound. Expiry counts whole seconds idle: at exactly the period the id
// is still kept.
TEST_F(BrokerExpiry, AnAgentIdUnseenForTheExpiryOnTheBrokersClockIsForgottenAndARecentOneStaysBound) {
  {
    Broker broker(options());
    auto old_node = publish_messages(address(broker), {hello_message("node-old"), batch_message(1, 1)}, "old-token");
    ASSERT_EQ(old_node.acks.size(), 1u) << old_node.status.error_message();
  }
  take_log();

  clock_->advance(2000 * kNsPerMs);  // idle for exactly the expiry: kept
  {
    Broker broker(options());
    EXPECT_EQ(take_log().find("forgot"), std::string::npos) << "forgotten at exactly the expiry";
    auto early = publish_messages(address(broker), {hello_message("node-old"), batch_message(2, 1)}, "other-token");
    EXPECT_EQ(early.status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << early.status.error_message();
    EXPECT_TRUE(early.acks.empty());

    clock_->advance(1100 * kNsPerMs);  // 3.1 s since node-old was seen, as the old test slept
    auto new_node = publish_messages(address(broker), {hello_message("node-new"), batch_message(1, 1)}, "new-token");
    ASSERT_EQ(new_node.acks.size(), 1u) << new_node.status.error_message();
  }
  take_log();

  Broker broker(options());
  const std::string log = take_log();
  EXPECT_NE(log.find("forgot 1 agent ids"), std::string::npos) << log;
  auto claimed = publish_messages(address(broker), {hello_message("node-old"), batch_message(1, 1)}, "other-token");
  ASSERT_EQ(claimed.acks.size(), 1u) << claimed.status.error_message();
  EXPECT_FALSE(claimed.acks[0].duplicate()) << "the forgotten id's mark still held";
  auto refused = publish_messages(address(broker), {hello_message("node-new"), batch_message(2, 1)}, "other-token");
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.status.error_message();
}

// The policies' updated_unix_ns is the broker's clock too (its realtime).
TEST_F(BrokerExpiry, AnAppliedPolicyIsStampedWithTheBrokersClock) {
  Broker broker(options());
  clock_->advance(5000 * kNsPerMs);
  mcp::v1::Policy policy;
  policy.set_service("checkout");
  policy.set_probe("handle_request");
  policy.set_sampling_rate(0.5);
  uint32_t pushed = 0;
  const auto stored = broker.apply_policy(policy, &pushed);
  EXPECT_EQ(stored.updated_unix_ns(), uint64_t{1'700'000'005'000'000'000});
}

}  // namespace
}  // namespace mcp::broker
