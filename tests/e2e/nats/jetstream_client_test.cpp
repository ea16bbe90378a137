// The broker's JetStream client (broker/store/jetstream_client.h) against one real nats-server: async
// publishes that JetStream refuses (the stream is gone: "no responders") are resent with the
// same id, off the library's ack thread, until the stream is back; each batch is acknowledged
// once, after it is stored. One that cannot be stored by the deadline fails with the reason.
// Skips when nats-server is not installed.
#include <gtest/gtest.h>
#include <nats/nats.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../support/broker_process.h"
#include "../../support/nats_cluster.h"
#include "broker/store/jetstream_client.h"
#include "clock/clock_source.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using broker::JetStreamClient;
using broker::PublishOutcome;

// A plain libnats connection for what the test does behind the client's back.
class Admin {
 public:
  explicit Admin(const std::string& url) {
    if (natsConnection_ConnectTo(&nc_, url.c_str()) != NATS_OK ||
        natsConnection_JetStream(&js_, nc_, nullptr) != NATS_OK)
      throw std::runtime_error("cannot connect to " + url);
  }
  ~Admin() {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    if (nc_ != nullptr) natsConnection_Destroy(nc_);
  }
  bool delete_stream(const char* name) { return js_DeleteStream(js_, name, nullptr, nullptr) == NATS_OK; }
  uint64_t messages(const char* name) {
    jsStreamInfo* si = nullptr;
    if (js_GetStreamInfo(&si, js_, name, nullptr, nullptr) != NATS_OK) return 0;
    const uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
  }

 private:
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// What the done callbacks reported, waited on without polling.
class Outcomes {
 public:
  JetStreamClient::PublishDone recorder() {
    return [this](const PublishOutcome& outcome, const std::string& error) {
      std::lock_guard lock(mu_);
      ++done_;
      if (outcome.duplicate) ++duplicates_;
      if (!error.empty()) errors_.push_back(error);
      cv_.notify_all();
    };
  }
  bool wait_for(size_t n, std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done_ >= n; });
  }
  size_t done() {
    std::lock_guard lock(mu_);
    return done_;
  }
  size_t duplicates() {
    std::lock_guard lock(mu_);
    return duplicates_;
  }
  std::vector<std::string> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t done_ = 0;
  size_t duplicates_ = 0;
  std::vector<std::string> errors_;
};

mcp::v1::SamplePacket batch(uint64_t sequence) {
  mcp::v1::SamplePacket packet;
  packet.set_agent_id("jetstream-client-test");
  packet.set_incarnation(7);
  packet.set_sequence(sequence);
  packet.add_samples()->set_service("checkout");
  return packet;
}

class JetStreamClientTest : public ::testing::Test {
 protected:
  static constexpr const char* kStream = "MCP_SAMPLES";

  void SetUp() override {
    if (test::nats_server_binary().empty())
      GTEST_SKIP() << "nats-server is not installed (Debian: apt-get install nats-server)";
    dir_ = test::make_temp_dir("mcp-jetstream-client");
    server_ = std::make_unique<test::NatsCluster>(1, dir_);
    options_.servers = {server_->url(0)};
    options_.replicas = 1;
    options_.stream = kStream;
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
  std::unique_ptr<test::NatsCluster> server_;
  broker::NatsBackendOptions options_;
};

TEST_F(JetStreamClientTest, RefusedPublishesAreResentInParallelUntilTheStreamIsBackAndEachIsAckedOnceStored) {
  options_.publish_timeout = 30s;
  JetStreamClient client(options_, nullptr);
  Admin admin(server_->url(0));
  ASSERT_TRUE(admin.delete_stream(kStream));

  // Every message is refused at once ("no responders") while the stream is gone. On the
  // library's ack thread a 50 ms pause per refusal would hold these 100 for 5 s in a row.
  constexpr size_t kBatches = 100;
  Outcomes outcomes;
  for (uint64_t seq = 1; seq <= kBatches; ++seq) client.publish_async(batch(seq), nullptr, outcomes.recorder());
  std::this_thread::sleep_for(300ms);  // the stream stays away a while: every message is refused
  EXPECT_EQ(outcomes.done(), 0u) << "nothing is acknowledged before it is stored";

  JetStreamClient again(options_, nullptr);  // creates the stream again
  const auto back = std::chrono::steady_clock::now();
  ASSERT_TRUE(outcomes.wait_for(kBatches, 30s)) << outcomes.done() << " of " << kBatches;
  const auto waited = std::chrono::steady_clock::now() - back;

  EXPECT_TRUE(outcomes.errors().empty()) << outcomes.errors().front();
  EXPECT_EQ(outcomes.done(), kBatches);
  EXPECT_EQ(outcomes.duplicates(), 0u);
  EXPECT_EQ(admin.messages(kStream), kBatches) << "each batch stored once";
  // Serialized on the ack thread, 100 refusals take at least 100 x 50 ms = 5 s by construction;
  // resent from the client's own thread they take well under a second (the margin is for a
  // loaded machine).
  EXPECT_LT(waited, 4s) << "resends were serialized behind one another";
}

TEST_F(JetStreamClientTest, ABatchNotStoredByTheDeadlineFailsWithTheReasonAfterRetrying) {
  options_.publish_timeout = 600ms;
  JetStreamClient client(options_, nullptr);
  Admin admin(server_->url(0));
  ASSERT_TRUE(admin.delete_stream(kStream));

  Outcomes outcomes;
  const auto start = std::chrono::steady_clock::now();
  client.publish_async(batch(1), nullptr, outcomes.recorder());
  ASSERT_TRUE(outcomes.wait_for(1, 10s));
  const auto took = std::chrono::steady_clock::now() - start;

  ASSERT_EQ(outcomes.errors().size(), 1u);
  EXPECT_NE(outcomes.errors().front().find("JetStream did not ack jetstream-client-test"), std::string::npos)
      << outcomes.errors().front();
  EXPECT_GE(took, 500ms) << "failed before its deadline instead of retrying";
}

// The policy bucket's stamps come from the broker's clock (BrokerOptions::clock), as the embedded
// store's do (BrokerExpiry.AnAppliedPolicyIsStampedWithTheBrokersClock).
TEST_F(JetStreamClientTest, AnAppliedPolicyIsStampedWithTheClockItWasGiven) {
  auto clock = std::make_shared<clock::SimulatedClockSource>(clock::SimulatedClockOptions{.read_cost_ns = 0});
  clock->advance(int64_t{5'000'000'000});
  JetStreamClient client(options_, nullptr, clock);
  mcp::v1::Policy policy;
  policy.set_service("checkout");
  policy.set_probe("handle_request");
  policy.set_sampling_rate(0.5);
  uint32_t pushed = 0;
  EXPECT_EQ(client.apply_policy(policy, &pushed).updated_unix_ns(), uint64_t{1'700'000'005'000'000'000});
  ASSERT_EQ(client.policies().size(), 1u);
  EXPECT_EQ(client.policies()[0].updated_unix_ns(), uint64_t{1'700'000'005'000'000'000}) << "as stored in the bucket";
}

}  // namespace
}  // namespace mcp
