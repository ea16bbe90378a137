// What the forwarder puts on the wire, seen by a real gRPC server on 127.0.0.1 port 0 that
// stands in for the broker: the Hello names the "events-v2" capability and batches carry the
// compact EventBlock (Batch.events), never per-event Samples, decoding to the events consumed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "wire/event_block.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "output/formatter.h"
#include "../../support/events.h"
#include "../../support/wait_until.h"

namespace mcp {
namespace {

class RecordingBroker final : public mcp::v1::Sampling::Service {
 public:
  grpc::Status Publish(grpc::ServerContext*,
                       grpc::ServerReaderWriter<mcp::v1::BrokerMessage, mcp::v1::AgentMessage>* stream) override {
    mcp::v1::AgentMessage msg;
    if (!refusal.empty()) {  // as a broker refusing the agent's credential
      stream->Read(&msg);
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, refusal);
    }
    while (stream->Read(&msg)) {
      {
        std::lock_guard lock(mu);
        messages.push_back(msg);
      }
      if (msg.has_batch()) {
        mcp::v1::BrokerMessage ack;
        ack.mutable_ack()->set_sequence(msg.batch().sequence());
        if (msg.batch().sequence() == refuse_sequence) {
          ack.mutable_ack()->set_refused(true);
          ack.mutable_ack()->set_reason("block string index out of range");
        }
        if (!stream->Write(ack)) break;
      }
    }
    return grpc::Status::OK;
  }
  // Events in the batches received so far.
  size_t events() {
    std::lock_guard lock(mu);
    size_t n = 0;
    EventBlockDecoder dec;
    std::string error;
    for (const auto& m : messages)
      if (m.has_batch() && dec.parse(m.batch().events(), error)) n += dec.size();
    return n;
  }
  std::mutex mu;
  std::vector<mcp::v1::AgentMessage> messages;
  std::atomic<uint64_t> refuse_sequence{0};  // acked as refused (Ack.refused)
  std::string refusal;                        // set before serving: every stream refused
};

struct ServedBroker {
  ServedBroker() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&broker);
    server = builder.BuildAndStart();
  }
  ~ServedBroker() {
    if (server) server->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  RecordingBroker broker;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

using test::make_event;
using test::to_json;

// Linger and age of an hour each: only poll_done(), an ack or the batch gap can ship a block.
ForwarderOptions poll_driven(const ServedBroker& served) {
  ForwarderOptions o;
  o.brokers = {served.address()};
  o.batch_linger = std::chrono::hours(1);
  o.batch_age = std::chrono::hours(1);
  return o;
}

TEST(ForwarderWire, SendsCompactBlocksAndAdvertisesEventsV2) {
  ServedBroker served;
  ASSERT_TRUE(served.server);
  ASSERT_GT(served.port, 0);
  RecordingBroker& broker = served.broker;

  constexpr uint32_t kEvents = 10;
  std::vector<std::string> expected;
  {
    ForwarderOptions o;
    o.brokers = {served.address()};
    o.batch_count = 4;  // several blocks: each must decode on its own
    Forwarder fwd(o);
    for (uint32_t i = 0; i < kEvents; ++i) {
      fwd.consume(make_event(i));
      expected.push_back(to_json(make_event(i)));
    }
    ASSERT_TRUE(fwd.flush_for(std::chrono::seconds(20)));
    EXPECT_EQ(fwd.stats().acked, kEvents);
  }
  served.server->Shutdown();

  std::lock_guard lock(broker.mu);
  ASSERT_FALSE(broker.messages.empty());
  ASSERT_TRUE(broker.messages.front().has_hello());
  const auto& caps = broker.messages.front().hello().capabilities();
  EXPECT_NE(std::find(caps.begin(), caps.end(), "events-v2"), caps.end());
  std::vector<std::string> got;
  EventBlockDecoder dec;
  Event e;
  for (const auto& m : broker.messages) {
    if (!m.has_batch()) continue;
    EXPECT_EQ(m.batch().samples_size(), 0) << "no per-event Samples on the wire";
    EXPECT_GT(m.batch().sequence(), 0u);
    std::string error;
    ASSERT_TRUE(dec.parse(m.batch().events(), error)) << error;
    EXPECT_LE(dec.size(), 4u);
    uint64_t id = 0;
    for (size_t i = 0; i < dec.size(); ++i) {
      dec.get(i, e, id);
      got.push_back(to_json(e));
    }
  }
  EXPECT_EQ(got, expected);
}

// Issue 29: a malformed batch (a misread spool) made the broker end the stream; the agent
// resent it on every reconnect and everything queued behind it waited (165,455 of 880,000
// acked). With "refused-acks" the broker acks it as refused: its events are counted lost, the
// rest are delivered, and a flush completes. Sequences count from 1 in the Hello's incarnation.
TEST(ForwarderWire, ABatchTheBrokerRefusesIsCountedLostAndDoesNotHoldTheRest) {
  ServedBroker served;
  ASSERT_TRUE(served.server);
  served.broker.refuse_sequence = 2;
  ForwarderOptions o;
  o.brokers = {served.address()};
  o.batch_count = 4;
  Forwarder fwd(o);
  for (uint32_t i = 0; i < 12; ++i) fwd.consume(make_event(i));
  ASSERT_TRUE(fwd.flush_for(std::chrono::seconds(20))) << "the refused batch held the flush";
  const auto s = fwd.stats();
  std::lock_guard lock(served.broker.mu);
  size_t refused_events = 0;  // how the events fell into batches depends on ack timing
  EventBlockDecoder dec;
  std::string error;
  for (const auto& m : served.broker.messages)
    if (m.has_batch() && m.batch().sequence() == 2 && dec.parse(m.batch().events(), error)) refused_events = dec.size();
  ASSERT_GT(refused_events, 0u);
  EXPECT_EQ(s.unreadable_batches, 1u);
  EXPECT_EQ(s.unreadable_events, refused_events);
  EXPECT_EQ(s.acked, 12u - refused_events);
  ASSERT_TRUE(served.broker.messages.front().has_hello());
  const auto& hello = served.broker.messages.front().hello();
  EXPECT_NE(hello.incarnation(), 0u);
  EXPECT_NE(std::find(hello.capabilities().begin(), hello.capabilities().end(), "refused-acks"),
            hello.capabilities().end());
  std::vector<uint64_t> sequences;
  for (const auto& m : served.broker.messages)
    if (m.has_batch()) sequences.push_back(m.batch().sequence());
  ASSERT_GE(sequences.size(), 3u);
  for (size_t i = 0; i < sequences.size(); ++i) EXPECT_EQ(sequences[i], i + 1) << "each batch once, counted from 1";
}

// Issue 29, item 7: the forwarder cancelled its stream before Finish(), so the broker's reason
// for ending it reached the log only as CANCELLED.
TEST(ForwarderWire, TheBrokersReasonForEndingTheStreamReachesTheLog) {
  ServedBroker served;
  ASSERT_TRUE(served.server);
  served.broker.refusal = "agent id 'node-1' is bound to another credential";
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);  // thread-safe to read
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("wire-test", sink));
  std::string log;
  {
    ForwarderOptions o;
    o.brokers = {served.address()};
    o.backoff_initial = std::chrono::milliseconds(20);
    o.backoff_max = std::chrono::milliseconds(50);
    Forwarder fwd(o);
    fwd.consume(make_event(1));
    fwd.flush_for(std::chrono::milliseconds(0));
    test::wait_until([&] {
      log.clear();
      for (const auto& line : sink->last_formatted()) log += line;
      return log.find("stream to " + served.address() + " ended") != std::string::npos;
    });
  }
  spdlog::set_default_logger(previous);
  EXPECT_NE(log.find(served.broker.refusal), std::string::npos) << log;
  EXPECT_EQ(log.find("CANCELLED"), std::string::npos) << log;
}

// The runtime calls poll_done() after each ring poll. With every batch acknowledged, the
// events of that poll go at once: no batcher thread waits out a linger or an age (here an hour
// each, so only poll_done() can send them). poll_done() is called in the loop as the runtime
// calls it, since the wire counts as idle only once the stream is up.
TEST(ForwarderWire, PollDoneShipsTheOpenBlockAtOnceWhileEverythingIsAcknowledged) {
  ServedBroker served;
  ASSERT_TRUE(served.server);
  Forwarder fwd(poll_driven(served));
  for (uint32_t i = 0; i < 3; ++i) fwd.consume(make_event(i));
  EXPECT_TRUE(test::wait_until([&] {
    fwd.poll_done();
    return served.broker.events() == 3;
  })) << "the open block waited for its age";
  EXPECT_EQ(fwd.stats().queued, 0u);
}

// Under heavy traffic (the last batch held batch_burst events or more) an idle wire does not
// ship the next block at once: it goes batch_gap after the previous batch, timed by the sender
// (no further poll_done() here), so the broker gets fewer, fuller batches. A light batch (the
// test above) never holds the next one back.
TEST(ForwarderWire, AfterAHeavyBatchTheNextWaitsForTheGapThenShipsWithoutAPoll) {
  ServedBroker served;
  ASSERT_TRUE(served.server);
  ForwarderOptions o = poll_driven(served);
  o.batch_burst = 4;
  o.batch_gap = std::chrono::milliseconds(300);
  Forwarder fwd(o);
  for (uint32_t i = 0; i < 4; ++i) fwd.consume(make_event(i));
  const auto first = std::chrono::steady_clock::now();
  ASSERT_TRUE(test::wait_until([&] {
    fwd.poll_done();
    return fwd.stats().acked == 4;
  }));
  // Everything is acknowledged: without the gap, this poll_done() would ship the block.
  for (uint32_t i = 4; i < 6; ++i) fwd.consume(make_event(i));
  fwd.poll_done();
  const uint64_t queued = fwd.stats().queued;
  // Read before the gap's end (the first batch left after `first`): the block must still wait.
  if (std::chrono::steady_clock::now() < first + o.batch_gap) EXPECT_EQ(queued, 2u) << "shipped inside the gap";
  ASSERT_TRUE(test::wait_until([&] { return served.broker.events() == 6; }))
      << "the sender did not ship the block at the gap's end";
  EXPECT_GE(std::chrono::steady_clock::now() - first, o.batch_gap);
}

// A full block is written to the spool on the consuming thread: when consume() returns it is
// stored (on disk with a spool directory) and counted as unacknowledged, not queued in memory
// for another thread. No broker listens on the address.
TEST(ForwarderWire, AFullBlockIsInTheSpoolWhenConsumeReturns) {
  ForwarderOptions o;
  o.brokers = {"127.0.0.1:1"};
  o.batch_count = 4;
  o.backoff_initial = std::chrono::milliseconds(10);
  o.flush_timeout = std::chrono::milliseconds(0);
  Forwarder fwd(o);
  for (uint32_t i = 0; i < 4; ++i) fwd.consume(make_event(i));
  const auto s = fwd.stats();
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.spooled_batches, 1u);
  EXPECT_EQ(s.unacked, 4u);
  fwd.consume(make_event(4));
  EXPECT_EQ(fwd.stats().queued, 1u);
  EXPECT_EQ(fwd.stats().unacked, 4u);
}

}  // namespace
}  // namespace mcp
