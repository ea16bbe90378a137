// Test support for tests against a running mcp-broker: a gRPC stub, Stats,
// polling with a deadline, a subscriber that keeps what it receives, and the uprobe
// event both suites forward (make_call_event).
// Shared by the embedded-broker and the JetStream e2e tests.
#pragma once
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/event.h"
#include "forward/channel.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "subscribe/subscribe_client.h"
#include "wait_until.h"

namespace mcp::test {

inline uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

constexpr uint64_t kQuarter = uint64_t{1} << 62;  // threshold for p = 0.25, weight 4

// A kept uprobe call of /usr/bin/worker:handle_request at p = 0.25; args[0] = i, so tests can
// count distinct events.
inline Event make_call_event(uint64_t i, const std::string& service = "checkout") {
  static constexpr std::string_view kProbe = "/usr/bin/worker:handle_request";  // Event::probe is a view
  Event e;
  e.ts_ns = 1'700'000'000'000'000'000ull + i;
  e.ktime_ns = 5'000'000 + i;
  e.hlc = (e.ts_ns << 16) | 1;
  e.kind = EventKind::kUprobe;
  e.probe_id = 3;
  e.probe = kProbe;
  e.pid = 4242;
  e.tid = 4243;
  e.cpu = 1;
  e.cgroup_id = 77;
  std::strncpy(e.comm.data(), "worker", e.comm.size());
  e.nargs = 2;
  e.args[0] = i;
  e.args[1] = 42;
  e.has_ret = true;
  e.ret = -static_cast<int64_t>(i % 100);
  e.has_duration = true;
  e.duration_ns = 1000 + i;
  e.threshold = kQuarter;
  e.service = service;
  e.tags = {{"zone", "a"}};
  return e;
}

// An end marker: one event a test publishes through the same agent (forwarder) after the events
// it counts, once those are acknowledged. One agent's batches are stored and delivered to each
// subscriber in order, so a subscriber that has the marker has had every batch stored before it,
// repeats and replays included: "nothing more arrives" is then a plain count, not a sleep.
// args[0] = kEndMarker + n (no test counts that far); `service` must pass the subscriber's filter.
constexpr uint64_t kEndMarker = 1'000'000'000;
inline Event make_end_marker(const std::string& service = "checkout", uint64_t n = 0) {
  return make_call_event(kEndMarker + n, service);
}
inline bool is_end_marker(const mcp::v1::Sample& s) { return s.args_size() > 0 && s.args(0) >= kEndMarker; }
// Publishes the end marker through `fwd`, the agent whose events a test counts, once everything
// it was given is acknowledged (an ack means stored, so the marker is stored after all of it).
// True when the marker is acknowledged too.
[[nodiscard]] inline bool publish_end_marker(mcp::Forwarder& fwd, const std::string& service = "checkout",
                                             uint64_t n = 0,
                                             std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  if (!fwd.flush_for(timeout)) return false;
  fwd.consume(make_end_marker(service, n));
  return fwd.flush_for(timeout);
}

// A subscriber and an agent's forwarder as the e2e suites use them: reconnects within 200 ms.
inline SubscribeOptions subscribe_options(const std::string& address, const std::string& service = "") {
  SubscribeOptions o;
  o.brokers = {address};
  o.service = service;
  o.backoff_initial = std::chrono::milliseconds(50);
  o.backoff_max = std::chrono::milliseconds(200);
  return o;
}
inline ForwarderOptions forwarder_options(std::vector<std::string> brokers, const std::string& agent_id,
                                          std::chrono::seconds flush_timeout) {
  ForwarderOptions o;
  o.brokers = std::move(brokers);
  o.agent_id = agent_id;
  o.batch_count = 100;
  o.backoff_initial = std::chrono::milliseconds(50);
  o.backoff_max = std::chrono::milliseconds(200);
  o.flush_timeout = flush_timeout;
  return o;
}

inline std::unique_ptr<mcp::v1::Sampling::Stub> stub_for(const std::string& address, const TlsFiles& tls = {}) {
  return mcp::v1::Sampling::NewStub(make_channel(address, tls, false));
}

inline mcp::v1::StatsReply broker_stats(const std::string& address, const std::string& token = "",
                                        const TlsFiles& tls = {}) {
  grpc::ClientContext ctx;
  add_token(ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  mcp::v1::StatsReply reply;
  stub_for(address, tls)->Stats(&ctx, {}, &reply);
  return reply;
}

// One hand-made Publish stream, as an agent (or someone pretending to be one) would send it.
inline mcp::v1::AgentMessage hello_message(const std::string& agent, uint64_t incarnation = 0) {
  mcp::v1::AgentMessage m;
  m.mutable_hello()->set_agent_id(agent);
  m.mutable_hello()->set_incarnation(incarnation);
  return m;
}
// `samples` samples of service "checkout", args[0] = first_arg + i, keep-all threshold.
inline mcp::v1::AgentMessage batch_message(uint64_t sequence, int samples, uint64_t first_arg = 0) {
  mcp::v1::AgentMessage m;
  m.mutable_batch()->set_sequence(sequence);
  for (int i = 0; i < samples; ++i) {
    auto* s = m.mutable_batch()->add_samples();
    s->set_service("checkout");
    s->set_threshold(UINT64_MAX);
    s->add_args(first_arg + static_cast<uint64_t>(i));
  }
  return m;
}

// Publish with raw bytes out (what no protobuf serialiser would send, or batches encoded once
// before a benchmark's clock starts) and BrokerMessages back: the generated stub's own method.
inline const grpc::internal::RpcMethod& publish_method() {
  static const grpc::internal::RpcMethod method("/mcp.v1.Sampling/Publish", grpc::internal::RpcMethod::BIDI_STREAMING);
  return method;
}
using RawPublishStream = grpc::ClientReaderWriter<grpc::ByteBuffer, mcp::v1::BrokerMessage>;
inline std::unique_ptr<RawPublishStream> raw_publish_stream(grpc::ChannelInterface* channel, grpc::ClientContext* ctx) {
  return std::unique_ptr<RawPublishStream>(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, mcp::v1::BrokerMessage>::Create(
          channel, publish_method(), ctx));
}
inline grpc::ByteBuffer byte_buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

struct PublishResult {
  std::vector<mcp::v1::Ack> acks;
  grpc::Status status;  // how the broker ended the stream
};

// Writes every message (raw bytes, so tests can send what no protobuf serialiser would: huge
// floods, invalid UTF-8), half-closes, and reads every reply until the broker ends the stream.
inline PublishResult publish_wire(const std::string& address, const std::vector<std::string>& messages,
                                  const std::string& token = "",
                                  std::chrono::seconds limit = std::chrono::seconds(15)) {
  auto channel = make_channel(address, {}, false);
  grpc::ClientContext ctx;
  add_token(ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + limit);
  const auto stream = raw_publish_stream(channel.get(), &ctx);
  for (const auto& m : messages)
    if (!stream->Write(byte_buffer(m))) break;  // the broker ended the stream: Finish() says why
  stream->WritesDone();
  PublishResult result;
  mcp::v1::BrokerMessage reply;
  while (stream->Read(&reply))
    if (reply.has_ack()) result.acks.push_back(reply.ack());
  result.status = stream->Finish();
  return result;
}

inline PublishResult publish_messages(const std::string& address,
                                      const std::vector<mcp::v1::AgentMessage>& messages,
                                      const std::string& token = "",
                                      std::chrono::seconds limit = std::chrono::seconds(15)) {
  std::vector<std::string> wire;
  for (const auto& m : messages) wire.push_back(m.SerializeAsString());
  return publish_wire(address, wire, token, limit);
}

// A subscriber on its own thread that keeps every sample; `gate`, when given,
// holds each packet until it is set (a stalled consumer).
class Collector {
 public:
  explicit Collector(SubscribeOptions options, std::shared_future<void> gate = {})
      : client_(std::move(options)), gate_(std::move(gate)) {
    thread_ = std::thread([this] {
      try {
        client_.run([this](const mcp::v1::SamplePacket& p) {
          if (gate_.valid()) gate_.wait();
          std::lock_guard lock(mu_);
          for (const auto& s : p.samples()) samples_.push_back(s);
          return true;
        });
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        error_ = e.what();
      }
      done_ = true;
    });
  }
  ~Collector() {
    client_.stop();
    thread_.join();
  }
  size_t count() const {
    std::lock_guard lock(mu_);
    return samples_.size();
  }
  // Distinct args[0] values: the tests give every event a unique one.
  size_t distinct() const {
    std::lock_guard lock(mu_);
    std::set<uint64_t> ids;
    for (const auto& s : samples_) ids.insert(s.args_size() > 0 ? s.args(0) : UINT64_MAX);
    return ids.size();
  }
  std::vector<mcp::v1::Sample> samples() const {
    std::lock_guard lock(mu_);
    return samples_;
  }
  mcp::v1::Sample first() const {
    std::lock_guard lock(mu_);
    return samples_.empty() ? mcp::v1::Sample() : samples_.front();
  }
  // The samples whose args[0] is `arg` (an end marker's copies), and whether there is one.
  std::vector<mcp::v1::Sample> with_arg(uint64_t arg) const {
    std::lock_guard lock(mu_);
    std::vector<mcp::v1::Sample> out;
    for (const auto& s : samples_)
      if (s.args_size() > 0 && s.args(0) == arg) out.push_back(s);
    return out;
  }
  bool has_arg(uint64_t arg) const { return !with_arg(arg).empty(); }
  // count() and distinct() of the samples other than end markers (is_end_marker).
  size_t count_unmarked() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& s : samples_) n += is_end_marker(s) ? 0 : 1;
    return n;
  }
  size_t distinct_unmarked() const {
    std::lock_guard lock(mu_);
    std::set<uint64_t> ids;
    for (const auto& s : samples_)
      if (!is_end_marker(s)) ids.insert(s.args_size() > 0 ? s.args(0) : UINT64_MAX);
    return ids.size();
  }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }
  bool done() const { return done_; }
  SubscribeStats stats() const { return client_.stats(); }

 private:
  SubscribeClient client_;
  std::shared_future<void> gate_;
  mutable std::mutex mu_;
  std::vector<mcp::v1::Sample> samples_;
  std::string error_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A Subscribe call on its own thread that keeps every packet as received.
class RawSubscriber {
 public:
  RawSubscriber(const std::string& address, mcp::v1::SubscriptionRequest req)
      : stub_(test::stub_for(address)) {
    thread_ = std::thread([this, req] {
      auto reader = stub_->Subscribe(&ctx_, req);
      mcp::v1::SamplePacket p;
      while (reader->Read(&p)) {
        std::lock_guard lock(mu_);
        packets_.push_back(p);
      }
      reader->Finish();
    });
  }
  ~RawSubscriber() {
    ctx_.TryCancel();
    thread_.join();
  }
  std::vector<mcp::v1::SamplePacket> packets() const {
    std::lock_guard lock(mu_);
    return packets_;
  }
  // Events (compact) or samples (v1) received so far.
  size_t events() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& p : packets_) {
      mcp::v1::EventBlock b;
      n += static_cast<size_t>(p.samples_size());
      if (!p.events().empty() && b.ParseFromString(p.events())) n += static_cast<size_t>(b.events_size());
    }
    return n;
  }

 private:
  std::unique_ptr<mcp::v1::Sampling::Stub> stub_;
  grpc::ClientContext ctx_;
  mutable std::mutex mu_;
  std::vector<mcp::v1::SamplePacket> packets_;
  std::thread thread_;
};

}  // namespace mcp::test
