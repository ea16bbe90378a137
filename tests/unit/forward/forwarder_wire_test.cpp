// What the forwarder puts on the wire, seen by a real gRPC server on 127.0.0.1 port 0 that
// stands in for the broker: the Hello names the "events-v2" capability and batches carry the
// compact EventBlock (Batch.events), never per-event Samples, decoding to the events consumed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <mutex>

#include "forward/event_block.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "output/formatter.h"
#include "../../support/events.h"

namespace mcp {
namespace {

class RecordingBroker final : public mcp::v1::Sampling::Service {
 public:
  grpc::Status Publish(grpc::ServerContext*,
                       grpc::ServerReaderWriter<mcp::v1::BrokerMessage, mcp::v1::AgentMessage>* stream) override {
    mcp::v1::AgentMessage msg;
    while (stream->Read(&msg)) {
      {
        std::lock_guard lock(mu);
        messages.push_back(msg);
      }
      if (msg.has_batch()) {
        mcp::v1::BrokerMessage ack;
        ack.mutable_ack()->set_sequence(msg.batch().sequence());
        if (!stream->Write(ack)) break;
      }
    }
    return grpc::Status::OK;
  }
  std::mutex mu;
  std::vector<mcp::v1::AgentMessage> messages;
};

using test::make_event;
using test::to_json;

TEST(ForwarderWire, SendsCompactBlocksAndAdvertisesEventsV2) {
  RecordingBroker broker;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&broker);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server);
  ASSERT_GT(port, 0);

  constexpr uint32_t kEvents = 10;
  std::vector<std::string> expected;
  {
    ForwarderOptions o;
    o.brokers = {"127.0.0.1:" + std::to_string(port)};
    o.batch_count = 4;  // several blocks: each must decode on its own
    Forwarder fwd(o);
    for (uint32_t i = 0; i < kEvents; ++i) {
      fwd.consume(make_event(i));
      expected.push_back(to_json(make_event(i)));
    }
    ASSERT_TRUE(fwd.flush_for(std::chrono::seconds(20)));
    EXPECT_EQ(fwd.stats().acked, kEvents);
  }
  server->Shutdown();

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

}  // namespace
}  // namespace mcp
