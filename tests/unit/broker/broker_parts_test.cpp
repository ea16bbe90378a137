// The broker's parts on their own: ingest checks and batch preparation, the per-probe stats and
// their bound, the policy fan-out. The wiring (broker.cpp) is covered end to end in tests/e2e.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "broker/ingest/ingest.h"
#include "broker/ingest/ingest_stats.h"
#include "broker/policy/policy_fanout.h"
#include "common/event.h"

namespace mcp::broker {
namespace {

mcp::v1::SamplePacket packet_of(const std::vector<std::pair<std::string, std::string>>& probes, double p) {
  mcp::v1::SamplePacket packet;
  for (const auto& [service, probe] : probes) {
    auto* s = packet.add_samples();
    s->set_service(service);
    s->set_probe(probe);
    s->set_threshold(probability_to_threshold(p));
  }
  return packet;
}

TEST(IngestStats, CountsAdjustedByTheSamplingProbability) {
  IngestStats stats(100);
  stats.stored(IngestStats::count(packet_of({{"cart", "add"}, {"cart", "add"}}, 0.25), nullptr));
  mcp::v1::StatsReply reply;
  stats.fill(&reply);
  ASSERT_EQ(reply.probes_size(), 1);
  EXPECT_EQ(reply.probes(0).events(), 2u);
  EXPECT_NEAR(reply.probes(0).adjusted_count(), 8.0, 1e-6);
  EXPECT_EQ(reply.batches(), 1u);
}

TEST(IngestStats, PairsPastTheBoundAreCountedTogetherAndTheirEventsInOverflow) {
  IngestStats stats(2);
  stats.stored(IngestStats::count(packet_of({{"a", "1"}, {"b", "2"}}, 1.0), nullptr));
  stats.stored(IngestStats::count(packet_of({{"c", "3"}, {"d", "4"}, {"d", "4"}, {"a", "1"}}, 1.0), nullptr));
  stats.duplicate();
  stats.refused();
  mcp::v1::StatsReply reply;
  stats.fill(&reply);
  std::map<std::string, uint64_t> events;
  for (const auto& p : reply.probes()) events[p.service() + "/" + p.probe()] = p.events();
  EXPECT_EQ(events, (std::map<std::string, uint64_t>{{"a/1", 2}, {"b/2", 1}, {"_other/_other", 3}}));
  EXPECT_EQ(reply.probe_series_overflow(), 3u);
  EXPECT_EQ(reply.batches(), 2u);
  EXPECT_EQ(reply.duplicate_batches(), 1u);
  EXPECT_EQ(reply.refused_publishes(), 1u);
}

TEST(IngestStats, ACounterThatIsNotACountIsIgnored) {
  mcp::v1::SamplePacket packet;
  auto* good = packet.add_counts();
  good->set_service("s");
  good->set_probe("p");
  good->set_seen(10);
  good->set_estimate(12.5);
  auto* bad = packet.add_counts();
  bad->set_service("s");
  bad->set_probe("p");
  bad->set_seen(1);
  bad->set_estimate(-1);
  const ProbeTotals totals = IngestStats::count(packet, nullptr);
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals.begin()->second.seen, 10u);
  EXPECT_DOUBLE_EQ(totals.begin()->second.corrected, 12.5);
}

TEST(Ingest, PrepareSetsTheAgentAndEveryMissingEventIdAndReportsTheNewestStamp) {
  mcp::v1::Batch batch;
  batch.set_sequence(9);
  for (uint64_t hlc : {30u, 70u, 50u}) {
    auto* s = batch.add_samples();
    s->set_agent_id("someone-else");
    s->set_hlc(hlc);
    s->set_threshold(UINT64_MAX);
  }
  batch.mutable_samples(1)->set_event_id(4242);
  PreparedBatch prepared;
  uint64_t newest = 0;
  ASSERT_TRUE(prepare_batch("node-a", 3, PublishLimits{}, &batch, &prepared, &newest).ok());
  EXPECT_EQ(newest, 70u);
  ASSERT_EQ(prepared.events(), 3u);
  EXPECT_EQ(prepared.packet->agent_id(), "node-a");
  EXPECT_EQ(prepared.packet->sequence(), 9u);
  EXPECT_EQ(prepared.packet->incarnation(), 3u);
  std::set<uint64_t> ids;
  for (const auto& s : prepared.packet->samples()) {
    EXPECT_EQ(s.agent_id(), "node-a") << "a sample cannot claim another agent";
    EXPECT_NE(s.event_id(), 0u);
    ids.insert(s.event_id());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(prepared.packet->samples(1).event_id(), 4242u) << "the agent's own id is kept";
}

TEST(Ingest, AStreamCarriesOneAgentIdAndOneIncarnation) {
  mcp::v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("node-b");
  EXPECT_EQ(check_message("node-a", 0, hello, PublishLimits{}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  hello.mutable_hello()->set_agent_id("node-a");
  hello.mutable_hello()->set_incarnation(2);
  EXPECT_EQ(check_message("node-a", 1, hello, PublishLimits{}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  hello.mutable_hello()->set_incarnation(1);
  EXPECT_TRUE(check_message("node-a", 1, hello, PublishLimits{}).ok());
}

TEST(Ingest, PolicyStatusIsBounded) {
  mcp::v1::PolicyStatus status;
  for (int i = 0; i < 257; ++i) status.add_refusals()->set_service("s");
  EXPECT_EQ(check_policy_status(status).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  status.Clear();
  status.add_refusals()->set_reason(std::string(1025, 'x'));
  EXPECT_EQ(check_policy_status(status).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  status.mutable_refusals(0)->set_reason("too many probes");
  EXPECT_TRUE(check_policy_status(status).ok());
}

TEST(Ingest, OnlyWhatTheClientGotWrongCountsAsARefusal) {
  EXPECT_TRUE(is_refusal(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "")));
  EXPECT_TRUE(is_refusal(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "")));
  EXPECT_FALSE(is_refusal(grpc::Status(grpc::StatusCode::UNAVAILABLE, ""))) << "the broker's own trouble";
  EXPECT_FALSE(is_refusal(grpc::Status::OK));
}

class RecordingPeer final : public PolicyPeer {
 public:
  bool send(const mcp::v1::BrokerMessage& msg) override {
    if (over) return false;
    got.push_back(msg);
    return true;
  }
  bool over = false;
  std::vector<mcp::v1::BrokerMessage> got;
};

TEST(PolicyFanout, PushesToEveryJoinedPeerThatIsStillThereAndNoneAfterItLeft) {
  PolicyFanout fanout;
  auto a = std::make_shared<RecordingPeer>();
  auto b = std::make_shared<RecordingPeer>();
  ASSERT_TRUE(fanout.join(a));
  ASSERT_TRUE(fanout.join(b));
  EXPECT_EQ(fanout.agents(), 2u);
  mcp::v1::BrokerMessage push;
  push.mutable_policies()->add_policies()->set_service("cart");
  EXPECT_EQ(fanout.push(push), 2u);
  b->over = true;
  EXPECT_EQ(fanout.push(push), 1u) << "a stream that is over is not counted as told";
  fanout.leave(a.get());
  EXPECT_EQ(fanout.push(push), 0u);
  EXPECT_EQ(a->got.size(), 2u);
  fanout.close();
  EXPECT_FALSE(fanout.join(std::make_shared<RecordingPeer>())) << "nothing joins a stopping broker";
}

TEST(PolicyFanout, RefusalsAreKeptPerConnectedAgentAndGoneWhenItLeaves) {
  PolicyFanout fanout;
  auto a = std::make_shared<RecordingPeer>();
  auto b = std::make_shared<RecordingPeer>();
  fanout.join(a);
  fanout.join(b);
  mcp::v1::PolicyStatus status;
  auto* r = status.add_refusals();
  r->set_service("cart");
  r->set_probe("add*");
  r->add_refused_by("add_item");
  r->add_refused_by("add_coupon");
  r->set_reason("no such symbol");
  fanout.set_refusals(b.get(), "node-b", status);
  fanout.set_refusals(a.get(), "node-a", status);
  const auto refusals = fanout.refusals();
  const PolicyKey key{"cart", "add*", ""};
  ASSERT_EQ(refusals.count(key), 1u);
  EXPECT_EQ(refusals.at(key), (std::vector<std::string>{"node-a: add_item, add_coupon (no such symbol)",
                                                        "node-b: add_item, add_coupon (no such symbol)"}));
  fanout.leave(a.get());
  EXPECT_EQ(fanout.refusals().at(key).size(), 1u);
}

}  // namespace
}  // namespace mcp::broker
