// bench_broker_fleet: the mcp-broker PROCESS's CPU (utime + stime from /proc/PID/stat) and
// memory (VmHWM, VmRSS from /proc/PID/status) under a fleet's loads on loopback, for this build's
// broker and, with --old, another binary in the same run (same loads, interleaved, one row each
// and the ratio new/old), so that both see the same noisy machine. Default args: journal in memory.
//  fanout: one agent stream (capability "events-v2") paced at --rate events/s in batches of
//          --batch, delivered to N compact subscribers (each on its own connection) for each N in
//          --subscribers. Batches are built before the clock starts and subscribers count events
//          by batch sequence without parsing them, so this process stays out of the broker's way.
//          CPU is counted from the first batch until the slowest subscriber has every event;
//          per delivery = broker CPU / (events delivered, summed over the subscribers).
//  fanin:  --agents agent streams ("fleet-0001"...) over --channels connections, each at
//          --agent-rate events/s in compact batches of --agent-batch, started staggered over one
//          batch interval, for --fanin-seconds; every event's ts_ns is the wall clock when its
//          batch was sent, so one compact subscriber measures agent-to-subscriber latency.
//  leaf:   the fan-in load on a broker over JetStream cluster A, one subscriber there and one on
//          cluster B's broker, which copies A's stream over a leaf node (--nats-source): the
//          latency the hop adds.
//   bench_broker_fleet [--mode fanout|fanin|both|leaf] [--old PATH] [--subscribers 5,20,50]
//                      [--rate 20000] [--seconds 5] [--batch 40] [--agents 1000]
//                      [--agent-rate 200] [--fanin-seconds 30] [--agent-batch 20] [--channels 50]
//                      [--linger MS] (every subscriber asks for batched packets held that long)
// "new" is this build's bin/mcp-broker, or $MCP_BROKER_BIN when set. Every wait has a deadline;
// events neither delivered nor reported dropped (SamplePacket.dropped_samples) show as "lost" /
// "unaccounted", sequences skipped as "gaps". On a small machine this process competes with the
// broker for the cores (fan-in prints its CPU): latency and subscriber drops reflect that.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <CLI/CLI.hpp>
#include <grpcpp/support/client_callback.h>

#include "broker_client.h"
#include "broker_process.h"
#include "compact_block.h"
#include "nats_cluster.h"
#include "common/fd_limit.h"
#include "proc_usage.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

using mcp::test::cpu_seconds;
using mcp::test::Memory;
using mcp::test::memory;

// A channel of its own (its own TCP connection): gRPC shares a subchannel between channels
// with equal arguments, so each gets a distinct one and a local subchannel pool. Otherwise as
// mcp::make_channel (insecure).
std::shared_ptr<grpc::Channel> own_channel(const std::string& address, int index) {
  grpc::ChannelArguments args;
  args.SetInt("mcp.bench.channel", index);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

using mcp::test::byte_buffer;

std::string hello_bytes(const std::string& agent) {
  auto m = mcp::test::hello_message(agent);
  m.mutable_hello()->add_capabilities("events-v2");
  return m.SerializeAsString();
}

// The agents' usual block, less the CUDA details and attributes (as bench_broker_cpu).
mcp::v1::EventBlock plain_block(int events, uint64_t first_arg) {
  auto block = mcp::test::compact_block(events, first_arg);
  for (auto& e : *block.mutable_events()) e.clear_cuda(), e.set_attributes(0);
  return block;
}

// The broker under test, with MCP_BROKER_BIN pointing at it (BrokerProcess reads it).
struct Broker {
  Broker(const std::string& binary, const std::string& stem) : dir(mcp::test::make_temp_dir(stem)) {
    setenv("MCP_BROKER_BIN", binary.c_str(), 1);
    process.emplace(std::vector<std::string>{}, dir / "broker.log");
  }
  ~Broker() {
    process.reset();
    std::filesystem::remove_all(dir);
  }
  std::filesystem::path dir;
  std::optional<mcp::test::BrokerProcess> process;
};

// Waits for a reactor's OnDone.
class DoneLatch {
 public:
  void done(const grpc::Status& status) {
    std::lock_guard lock(mu_);
    status_ = status;
    done_ = true;
    cv_.notify_all();
  }
  bool wait(Clock::duration limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done_; });
  }
  bool is_done() const {
    std::lock_guard lock(mu_);
    return done_;
  }
  grpc::Status status() const {
    std::lock_guard lock(mu_);
    return status_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

// Cancels what is still running, waits for the reactors' OnDone, and leaks (rather than frees
// under gRPC's feet) any that never finish; returns how many did not.
template <typename R>
size_t end_all(std::vector<std::unique_ptr<R>>& reactors, Clock::duration grace) {
  const auto deadline = Clock::now() + grace;
  for (auto& r : reactors)
    if (!r->latch.wait(std::max(Clock::duration::zero(), deadline - Clock::now()))) r->context.TryCancel();
  size_t stuck = 0;
  for (auto& r : reactors)
    if (!r->latch.wait(5s)) ++stuck, (void)r.release();
  reactors.clear();
  return stuck;
}

// ---- fan-out ---------------------------------------------------------------------------------

uint32_t g_linger_ms = 0;  // --linger: every subscriber asks for it

// A compact subscriber that counts the events of each packet from its sequence (the publisher's
// table), without parsing the block.
class CountingSubscriber final : public grpc::ClientReadReactor<mcp::v1::SamplePacket> {
 public:
  CountingSubscriber(const std::string& address, int index, const std::string& agent,
                     const std::vector<uint32_t>& events_by_sequence)
      : stub_(mcp::v1::Sampling::NewStub(own_channel(address, index))),
        agent_(agent),
        events_by_sequence_(events_by_sequence) {
    request_.set_compact(true);
    request_.set_batched(true);
    request_.set_linger_ms(g_linger_ms);
    stub_->async()->Subscribe(&context, &request_, this);
    StartRead(&packet_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (packet_.more_size() == 0) count(packet_);
    for (const auto& p : packet_.more()) count(p);
    StartRead(&packet_);
  }
  void count(const mcp::v1::SamplePacket& p) {
    const uint64_t seq = p.sequence();
    if (p.agent_id() == agent_ && seq < events_by_sequence_.size())
      events.fetch_add(events_by_sequence_[seq], std::memory_order_relaxed);
    if (seq != last_sequence_ + 1 && p.dropped_packets() == 0) unexplained_gaps.fetch_add(1);
    last_sequence_ = seq;  // reads are serial
    packets.fetch_add(1, std::memory_order_relaxed);
    dropped_packets.fetch_add(p.dropped_packets(), std::memory_order_relaxed);
    dropped_events.fetch_add(p.dropped_samples(), std::memory_order_relaxed);
  }
  void OnDone(const grpc::Status& status) override { latch.done(status); }

  grpc::ClientContext context;
  DoneLatch latch;
  std::atomic<uint64_t> packets{0}, events{0}, dropped_packets{0}, dropped_events{0};
  std::atomic<uint64_t> unexplained_gaps{0};  // a sequence skipped with no drop reported

 private:
  uint64_t last_sequence_ = 0;
  std::unique_ptr<mcp::v1::Sampling::Stub> stub_;
  const std::string agent_;
  const std::vector<uint32_t>& events_by_sequence_;
  mcp::v1::SubscriptionRequest request_;
  mcp::v1::SamplePacket packet_;
};

struct FanoutResult {
  uint64_t expected = 0;      // events per subscriber
  uint64_t slowest = 0;       // events the slowest subscriber received
  uint64_t deliveries = 0;    // events received, all subscribers
  uint64_t dropped = 0;       // SamplePacket.dropped_packets, all subscribers
  uint64_t broker_dropped = 0;  // Stats.subscriber_dropped_packets
  uint64_t lost = 0;          // most events a subscriber neither received nor was told were dropped
  uint64_t gaps = 0;          // sequences skipped with no drop reported, all subscribers
  double cpu_s = 0, wall_s = 0;
  Memory mem;
  std::string error;
};

FanoutResult fanout(const std::string& binary, int subscribers, double rate, double seconds, int batch) {
  FanoutResult r;
  Broker broker(binary, "mcp-bench-fleet-fanout");
  const auto& proc = *broker.process;
  const std::string agent = "bench-fanout";

  // Every batch before the clock starts; events_by_sequence[seq] = events in batch seq.
  const auto events = static_cast<uint64_t>(std::llround(rate * seconds));
  std::vector<grpc::ByteBuffer> batches;
  std::vector<uint32_t> events_by_sequence{0};
  for (uint64_t first = 0, seq = 1; first < events; first += static_cast<uint64_t>(batch), ++seq) {
    const int n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(batch), events - first));
    batches.push_back(byte_buffer(mcp::test::compact_batch_message(seq, plain_block(n, first)).SerializeAsString()));
    events_by_sequence.push_back(static_cast<uint32_t>(n));
  }
  r.expected = events;

  std::vector<std::unique_ptr<CountingSubscriber>> subs;
  for (int i = 0; i < subscribers; ++i)
    subs.push_back(std::make_unique<CountingSubscriber>(proc.address(), i, agent, events_by_sequence));
  const auto all_subscribed = [&] {
    return mcp::test::broker_stats(proc.address()).subscribers() == static_cast<uint32_t>(subscribers);
  };
  if (!mcp::test::wait_until(all_subscribed, 15s)) {
    r.error = "broker reports " + std::to_string(mcp::test::broker_stats(proc.address()).subscribers()) +
              " subscribers, not " + std::to_string(subscribers);
    end_all(subs, 0s);
    return r;
  }

  // One agent stream as bench_broker_cpu's: raw bytes out, acks read on a thread.
  auto channel = own_channel(proc.address(), subscribers);
  grpc::ClientContext ctx;
  const auto stream = mcp::test::raw_publish_stream(channel.get(), &ctx);
  std::thread acks([&] {
    mcp::v1::BrokerMessage reply;
    while (stream->Read(&reply)) {
    }
  });
  bool written = stream->Write(byte_buffer(hello_bytes(agent)));

  const double cpu0 = cpu_seconds(proc.pid());
  const auto start = Clock::now();
  uint64_t sent = 0;
  for (size_t i = 0; written && i < batches.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(sent) * 1e9 / rate)));
    written = stream->Write(batches[i]);
    sent += events_by_sequence[i + 1];
  }
  if (!written) r.error = "the broker ended the Publish stream";
  const auto has_all = [&](const auto& s) { return s->events + s->dropped_events >= sent; };
  mcp::test::wait_until([&] { return std::all_of(subs.begin(), subs.end(), has_all); }, 60s);
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu_s = cpu_seconds(proc.pid()) - cpu0;
  r.mem = memory(proc.pid());
  r.broker_dropped = mcp::test::broker_stats(proc.address()).subscriber_dropped_packets();
  r.slowest = subs.empty() ? 0 : UINT64_MAX;
  for (const auto& s : subs) {
    r.slowest = std::min<uint64_t>(r.slowest, s->events);
    r.deliveries += s->events;
    r.dropped += s->dropped_packets;
    r.lost = std::max<uint64_t>(r.lost, sent - std::min<uint64_t>(sent, s->events + s->dropped_events));
    r.gaps += s->unexplained_gaps;
  }
  if (r.lost > 0 && r.error.empty()) r.error = "incomplete at the deadline: CPU s includes the wait";

  stream->WritesDone();
  ctx.TryCancel();  // the acks reader need not wait for the broker
  acks.join();
  stream->Finish();
  if (const size_t stuck = end_all(subs, 0s); stuck > 0 && r.error.empty())
    r.error = std::to_string(stuck) + " subscriber calls never ended";
  return r;
}

// ---- fan-in ----------------------------------------------------------------------------------

// One agent's Publish stream, callback API: a queue of pending batches with at most one write
// outstanding, and a read always pending for acks (policy pushes are ignored). A hold keeps the
// call open for writes until close() or a failed write.
class Agent final : public grpc::ClientBidiReactor<grpc::ByteBuffer, mcp::v1::BrokerMessage> {
 public:
  Agent(grpc::ChannelInterface* channel, const std::string& id) {
    grpc::internal::ClientCallbackReaderWriterFactory<grpc::ByteBuffer, mcp::v1::BrokerMessage>::Create(
        channel, mcp::test::publish_method(), &context, this);
    AddHold();
    StartRead(&reply_);
    StartCall();
    send(byte_buffer(hello_bytes(id)));
  }

  // Queues one message; false once the stream has failed or is closing.
  bool send(grpc::ByteBuffer buffer) {
    {
      std::lock_guard lock(mu_);
      if (failed_ || closing_) return false;
      if (writing_) {
        pending_.push_back(std::move(buffer));
        return true;
      }
      writing_ = true;
      current_ = std::move(buffer);
    }
    StartWrite(&current_);
    return true;
  }
  // Half-closes once the queue is written; the broker then ends the stream.
  void close() {
    {
      std::lock_guard lock(mu_);
      if (failed_ || closing_) return;
      closing_ = true;
      if (writing_) return;  // OnWriteDone finishes it
    }
    StartWritesDone();
    RemoveHold();
  }
  bool failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }

  void OnWriteDone(bool ok) override {
    enum { kNothing, kWrite, kClose, kFailed } next = kNothing;
    {
      std::lock_guard lock(mu_);
      if (!ok) {
        failed_ = true;
        writing_ = false;
        pending_.clear();
        next = kFailed;
      } else if (!pending_.empty()) {
        current_ = std::move(pending_.front());
        pending_.pop_front();
        next = kWrite;
      } else {
        writing_ = false;
        if (closing_) next = kClose;
      }
    }
    if (next == kWrite) StartWrite(&current_);
    if (next == kClose) StartWritesDone();
    if (next == kClose || next == kFailed) RemoveHold();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    (reply_.has_ack() ? acks : pushes).fetch_add(1, std::memory_order_relaxed);
    if (reply_.has_ack()) {
      if (reply_.ack().refused()) refused.fetch_add(1, std::memory_order_relaxed);
      if (reply_.ack().sequence() > acked) acked.store(reply_.ack().sequence());  // reads are serial
    }
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& status) override {
    {
      std::lock_guard lock(mu_);
      if (!closing_ || !status.ok()) failed_ = true;  // ended by the broker, not by us
    }
    latch.done(status);
  }

  grpc::ClientContext context;
  DoneLatch latch;
  uint64_t next_sequence = 1;        // the pacer's
  std::atomic<uint64_t> sent{0};     // the last batch sequence queued
  std::atomic<uint64_t> acked{0};    // the highest acked
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> acks{0}, pushes{0};  // Ack messages, other BrokerMessages (policies)

 private:
  mutable std::mutex mu_;
  std::deque<grpc::ByteBuffer> pending_;
  grpc::ByteBuffer current_;
  bool writing_ = false, closing_ = false, failed_ = false;
  mcp::v1::BrokerMessage reply_;
};

// One compact subscriber on a thread: parses every block, keeps each event's latency (µs).
class LatencySubscriber {
 public:
  explicit LatencySubscriber(const std::string& address, int index)
      : stub_(mcp::v1::Sampling::NewStub(own_channel(address, index))) {
    thread_ = std::thread([this] {
      mcp::v1::SubscriptionRequest req;
      req.set_compact(true);
      req.set_batched(true);
      req.set_linger_ms(g_linger_ms);
      auto reader = stub_->Subscribe(&ctx_, req);
      mcp::v1::SamplePacket message;
      mcp::v1::EventBlock block;
      std::unordered_map<std::string, uint64_t> last_sequence;
      const auto take = [&](const mcp::v1::SamplePacket& p, uint64_t now) {
        dropped_events += p.dropped_samples();
        uint64_t& last = last_sequence[p.agent_id()];
        if (p.sequence() != last + 1) ++gaps;
        last = p.sequence();
        if (p.events().empty() || !block.ParseFromString(p.events())) return;
        for (const auto& e : block.events())
          latency_us_.push_back(static_cast<uint32_t>(now > e.ts_ns() ? (now - e.ts_ns()) / 1000 : 0));
        events += static_cast<uint64_t>(block.events_size());
      };
      while (reader->Read(&message)) {
        const uint64_t now = mcp::test::unix_ns();
        if (message.more_size() == 0) take(message, now);
        for (const auto& p : message.more()) take(p, now);
      }
      reader->Finish();
    });
  }
  ~LatencySubscriber() { stop(); }
  // Ends the call; latencies() is safe to use afterwards.
  void stop() {
    if (!thread_.joinable()) return;
    ctx_.TryCancel();
    thread_.join();
  }
  std::vector<uint32_t>& latencies() { return latency_us_; }

  std::atomic<uint64_t> events{0}, dropped_events{0};
  std::atomic<uint64_t> gaps{0};  // an agent's sequence skipped (a drop, or a loss)

 private:
  std::unique_ptr<mcp::v1::Sampling::Stub> stub_;
  grpc::ClientContext ctx_;
  std::vector<uint32_t> latency_us_;
  std::thread thread_;
};

struct FaninResult {
  uint32_t streams = 0;            // Stats.agents_connected once all were connected
  uint64_t batches_sent = 0, batches_acked = 0, refused = 0;
  uint64_t acks = 0, pushes = 0;   // BrokerMessages the agents read: acks, others
  uint64_t events_sent = 0, events_delivered = 0, dropped_events = 0;  // SamplePacket.dropped_samples
  uint64_t broker_dropped = 0;     // Stats.subscriber_dropped_packets
  uint64_t gaps = 0;               // batches the subscriber saw an agent's sequence skip
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
  // The leaf mode's subscriber on the other cluster's broker: its events and latencies.
  uint64_t remote_events = 0;
  double remote_p50_ms = 0, remote_p95_ms = 0, remote_p99_ms = 0, remote_max_ms = 0;
  double cpu_s = 0, wall_s = 0;
  double pace_s = 0;               // the pacer's time for --fanin-seconds of batches (late when above)
  double bench_cpu_s = 0;          // this process's CPU while pacing: it shares the machine's cores
  double connected_rss_mib = 0;    // VmRSS with every stream open, before the load
  Memory mem;                      // at the end of the load
  size_t failed = 0;               // streams that failed or that the broker ended
  std::string error;
};

// P50/P95/P99/max in ms of latencies in µs (reordered).
std::array<double, 4> percentiles(std::vector<uint32_t>& lat) {
  if (lat.empty()) return {0, 0, 0, 0};
  const auto at = [&](double q) {
    auto nth = lat.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(lat.size() - 1));
    std::nth_element(lat.begin(), nth, lat.end());
    return *nth / 1000.0;
  };
  return {at(0.50), at(0.95), at(0.99), *std::max_element(lat.begin(), lat.end()) / 1000.0};
}

// The fan-in load against `proc`; with `remote` (the leaf mode) a second subscriber there, whose
// events and latencies go in remote_*.
FaninResult drive_fanin(const mcp::test::BrokerProcess& proc, int agents, double agent_rate, double seconds,
                        int agent_batch, int channels, const std::string& remote = "") {
  FaninResult r;
  const auto stats = [&] { return mcp::test::broker_stats(proc.address()); };

  LatencySubscriber subscriber(proc.address(), channels);
  std::optional<LatencySubscriber> far;
  if (!remote.empty()) far.emplace(remote, channels + 1);
  if (!mcp::test::wait_until([&] { return stats().subscribers() == 1; }, 15s) ||
      (far && !mcp::test::wait_until([&] { return mcp::test::broker_stats(remote).subscribers() == 1; }, 15s))) {
    r.error = "the subscriber did not register";
    return r;
  }
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (int c = 0; c < channels; ++c) chans.push_back(own_channel(proc.address(), c));
  std::vector<std::unique_ptr<Agent>> fleet;
  for (int i = 0; i < agents; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "fleet-%04d", i + 1);
    fleet.push_back(std::make_unique<Agent>(chans[static_cast<size_t>(i % channels)].get(), id));
  }
  const auto count_failed = [&] {
    return static_cast<size_t>(std::count_if(fleet.begin(), fleet.end(), [](const auto& a) { return a->failed(); }));
  };
  mcp::test::wait_until([&] { return stats().agents_connected() >= static_cast<uint32_t>(agents) || count_failed() > 0; },
                        30s);
  r.streams = stats().agents_connected();
  r.connected_rss_mib = memory(proc.pid()).rss_mib;

  // Agent i sends at start + (round + i / agents) * interval: smooth over each interval.
  const double interval_s = agent_batch / agent_rate;
  const auto rounds = static_cast<int>(std::ceil(seconds / interval_s));
  auto block = plain_block(agent_batch, 0);
  const double cpu0 = cpu_seconds(proc.pid()), bench_cpu0 = cpu_seconds(getpid());
  const auto start = Clock::now();
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < agents; ++i) {
      const double due_s = (round + static_cast<double>(i) / agents) * interval_s;
      std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(due_s * 1e9)));
      auto& agent = *fleet[static_cast<size_t>(i)];
      const uint64_t now = mcp::test::unix_ns();
      for (auto& e : *block.mutable_events()) e.set_ts_ns(now);
      const uint64_t seq = agent.next_sequence;
      if (!agent.send(byte_buffer(mcp::test::compact_batch_message(seq, block).SerializeAsString()))) continue;
      ++agent.next_sequence;
      agent.sent.store(seq);
      ++r.batches_sent;
      r.events_sent += static_cast<uint64_t>(agent_batch);
    }
  }
  r.pace_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.bench_cpu_s = cpu_seconds(getpid()) - bench_cpu0;
  const auto all_acked = [&] {
    return std::all_of(fleet.begin(), fleet.end(), [](const auto& a) { return a->failed() || a->acked >= a->sent; });
  };
  const auto all_delivered = [&] {
    return subscriber.events + subscriber.dropped_events >= r.events_sent &&
           (!far || far->events + far->dropped_events >= r.events_sent);
  };
  mcp::test::wait_until([&] { return all_acked() && all_delivered(); }, 60s);
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu_s = cpu_seconds(proc.pid()) - cpu0;
  r.mem = memory(proc.pid());
  r.broker_dropped = stats().subscriber_dropped_packets();
  r.events_delivered = subscriber.events;
  r.dropped_events = subscriber.dropped_events;
  r.gaps = subscriber.gaps;
  if (r.events_delivered + r.dropped_events < r.events_sent)
    r.error = "incomplete at the deadline: CPU s and wall s include the wait";
  for (const auto& a : fleet) {
    r.batches_acked += std::min<uint64_t>(a->acked, a->sent);
    r.refused += a->refused;
    r.acks += a->acks;
    r.pushes += a->pushes;
  }
  r.failed = count_failed();
  grpc::Status first_failure;
  for (const auto& a : fleet)
    if (a->failed() && a->latch.is_done() && !a->latch.status().ok()) {
      first_failure = a->latch.status();
      break;
    }
  if (!first_failure.ok()) r.error += (r.error.empty() ? "" : "; ") + ("e.g. " + first_failure.error_message());

  for (auto& a : fleet) a->close();
  if (const size_t stuck = end_all(fleet, 20s); stuck > 0)
    r.error += (r.error.empty() ? "" : "; ") + std::to_string(stuck) + " agent calls never ended";
  subscriber.stop();
  const auto local = percentiles(subscriber.latencies());
  r.p50_ms = local[0], r.p95_ms = local[1], r.p99_ms = local[2], r.max_ms = local[3];
  if (far) {
    far->stop();
    r.remote_events = far->events;
    const auto p = percentiles(far->latencies());
    r.remote_p50_ms = p[0], r.remote_p95_ms = p[1], r.remote_p99_ms = p[2], r.remote_max_ms = p[3];
  }
  return r;
}

FaninResult fanin(const std::string& binary, int agents, double agent_rate, double seconds, int agent_batch,
                  int channels) {
  Broker broker(binary, "mcp-bench-fleet-fanin");
  return drive_fanin(*broker.process, agents, agent_rate, seconds, agent_batch, channels);
}

// Two single-node JetStream clusters joined by a leaf node (domains a and b), a broker on each;
// B's copies A's stream (--nats-source a). The agents publish to A; one subscriber on each.
FaninResult leaf_hop(const std::string& binary, int agents, double agent_rate, double seconds, int agent_batch,
                     int channels) {
  const auto dir = mcp::test::make_temp_dir("mcp-bench-fleet-leaf");
  const int leaf_port = mcp::test::free_ports(1).front();
  mcp::test::NatsCluster a(1, dir / "a",
                           {"a", "a", "leafnodes {\n  listen: 127.0.0.1:" + std::to_string(leaf_port) + "\n}\n"});
  mcp::test::NatsCluster b(1, dir / "b",
                           {"b", "b",
                            "leafnodes {\n  remotes: [ { url: \"nats-leaf://127.0.0.1:" + std::to_string(leaf_port) +
                                "\"\n    deny_imports: [\"mcp.>\", \"$KV.>\"]\n    deny_exports: [\"mcp.>\", \"$KV.>\"] } ]\n}\n"});
  setenv("MCP_BROKER_BIN", binary.c_str(), 1);
  FaninResult r;
  {
    mcp::test::BrokerProcess broker_a({"--backend", a.servers(), "--stream-replicas", "1"}, dir / "broker-a.log");
    mcp::test::BrokerProcess broker_b({"--backend", b.servers(), "--stream-replicas", "1", "--nats-source", "a"},
                                      dir / "broker-b.log");
    r = drive_fanin(broker_a, agents, agent_rate, seconds, agent_batch, channels, broker_b.address());
  }
  std::filesystem::remove_all(dir);
  return r;
}

// ---- report ----------------------------------------------------------------------------------

std::string ratio(double value, double old_value) {
  if (old_value <= 0 || value <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", value / old_value);
  return buf;
}

struct Target {
  std::string name;    // "old" | "new"
  std::string binary;
};

std::string format(const char* fmt, auto... values) {
  char buf[96];
  std::snprintf(buf, sizeof buf, fmt, values...);
  return buf;
}

// One row per figure, one column per broker, and new/old where both ran.
void print_fanin(const std::vector<Target>& targets, const std::vector<FaninResult>& results) {
  using U = unsigned long long;
  struct Row {
    const char* label;
    std::function<std::string(const FaninResult&)> text;
    std::function<double(const FaninResult&)> value;  // for the ratio; null: none
  };
  const auto us_per_event = [](const FaninResult& r) {
    return r.events_delivered ? r.cpu_s * 1e6 / static_cast<double>(r.events_delivered) : 0;
  };
  const std::vector<Row> rows{
      {"streams (Stats agents_connected)", [](const FaninResult& r) { return std::to_string(r.streams); }, nullptr},
      {"failed streams", [](const FaninResult& r) { return std::to_string(r.failed); }, nullptr},
      {"batches acked/sent",
       [](const FaninResult& r) { return format("%llu/%llu", U(r.batches_acked), U(r.batches_sent)); }, nullptr},
      {"batches refused", [](const FaninResult& r) { return std::to_string(r.refused); }, nullptr},
      {"Ack messages read", [](const FaninResult& r) { return std::to_string(r.acks); }, nullptr},
      {"other BrokerMessages read (policies)", [](const FaninResult& r) { return std::to_string(r.pushes); },
       nullptr},
      {"events delivered/sent",
       [](const FaninResult& r) { return format("%llu/%llu", U(r.events_delivered), U(r.events_sent)); }, nullptr},
      {"events dropped for the subscriber", [](const FaninResult& r) { return std::to_string(r.dropped_events); },
       nullptr},
      {"events unaccounted (not got, not dropped)",
       [](const FaninResult& r) {
         return std::to_string(r.events_sent - std::min(r.events_sent, r.events_delivered + r.dropped_events));
       },
       nullptr},
      {"packets dropped (broker Stats)", [](const FaninResult& r) { return std::to_string(r.broker_dropped); }, nullptr},
      {"sequence gaps seen by the subscriber", [](const FaninResult& r) { return std::to_string(r.gaps); }, nullptr},
      {"latency p50 ms", [](const FaninResult& r) { return format("%.1f", r.p50_ms); },
       [](const FaninResult& r) { return r.p50_ms; }},
      {"latency p95 ms", [](const FaninResult& r) { return format("%.1f", r.p95_ms); },
       [](const FaninResult& r) { return r.p95_ms; }},
      {"latency p99 ms", [](const FaninResult& r) { return format("%.1f", r.p99_ms); },
       [](const FaninResult& r) { return r.p99_ms; }},
      {"latency max ms", [](const FaninResult& r) { return format("%.1f", r.max_ms); },
       [](const FaninResult& r) { return r.max_ms; }},
      {"pacing s (late when above the load's)", [](const FaninResult& r) { return format("%.2f", r.pace_s); },
       nullptr},
      {"wall s, first batch to all delivered", [](const FaninResult& r) { return format("%.2f", r.wall_s); },
       nullptr},
      {"broker CPU s", [](const FaninResult& r) { return format("%.2f", r.cpu_s); },
       [](const FaninResult& r) { return r.cpu_s; }},
      {"broker CPU us/event", [&](const FaninResult& r) { return format("%.3f", us_per_event(r)); }, us_per_event},
      {"bench process CPU s while pacing", [](const FaninResult& r) { return format("%.2f", r.bench_cpu_s); },
       nullptr},
      {"broker VmRSS MiB, streams open, idle", [](const FaninResult& r) { return format("%.1f", r.connected_rss_mib); },
       [](const FaninResult& r) { return r.connected_rss_mib; }},
      {"broker VmHWM MiB", [](const FaninResult& r) { return format("%.1f", r.mem.hwm_mib); },
       [](const FaninResult& r) { return r.mem.hwm_mib; }},
      {"broker VmRSS MiB, end of load", [](const FaninResult& r) { return format("%.1f", r.mem.rss_mib); },
       [](const FaninResult& r) { return r.mem.rss_mib; }},
  };
  std::printf("%-42s", "");
  for (const auto& t : targets) std::printf(" %17s", t.name.c_str());
  if (results.size() > 1) std::printf(" %8s", "new/old");
  std::printf("\n");
  for (const auto& row : rows) {
    std::printf("%-42s", row.label);
    for (const auto& r : results) std::printf(" %17s", row.text(r).c_str());
    if (results.size() > 1 && row.value) std::printf(" %8s", ratio(row.value(results.back()), row.value(results.front())).c_str());
    std::printf("\n");
  }
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].error.empty()) std::printf("%s: %s\n", targets[i].name.c_str(), results[i].error.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcp-broker process CPU and memory under fan-out and fan-in, new vs old"};
  std::string mode = "both";
  std::string old_binary;
  std::vector<int> subscriber_counts{5, 20, 50};
  double rate = 20000, seconds = 5;
  int batch = 40;
  int agents = 1000, agent_batch = 20, channels = 50;
  double agent_rate = 200, fanin_seconds = 30;
  app.add_option("--linger", g_linger_ms,
                 "subscribers ask for batched packets held up to this many ms (SubscriptionRequest.linger_ms; "
                 "a broker that predates it ignores it)");
  app.add_option("--mode", mode,
                 "fanout | fanin | both | leaf (the fan-in load on a broker over JetStream, a second "
                 "subscriber on another cluster's broker behind a leaf node; --agents etc. apply)")
      ->check(CLI::IsMember({"fanout", "fanin", "both", "leaf"}));
  app.add_option("--old", old_binary, "also run this mcp-broker binary, for a ratio new/old")->check(CLI::ExistingFile);
  app.add_option("--subscribers", subscriber_counts, "fan-out: subscriber counts, one run each")->delimiter(',');
  app.add_option("--rate", rate, "fan-out: events/s offered")->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "fan-out: seconds of load per run")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "fan-out: events per batch (40: an agent at 20k ev/s, flushing ~1/ms)")
      ->check(CLI::PositiveNumber);
  app.add_option("--agents", agents, "fan-in: agent streams")->check(CLI::PositiveNumber);
  app.add_option("--agent-rate", agent_rate, "fan-in: events/s per agent")->check(CLI::PositiveNumber);
  app.add_option("--fanin-seconds", fanin_seconds, "fan-in: seconds of load")->check(CLI::PositiveNumber);
  app.add_option("--agent-batch", agent_batch, "fan-in: events per batch")->check(CLI::PositiveNumber);
  app.add_option("--channels", channels, "fan-in: connections the agents are spread over")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  channels = std::min(channels, agents);
  mcp::raise_fd_limit();

  std::vector<Target> targets;
  if (!old_binary.empty()) targets.push_back({"old", std::filesystem::absolute(old_binary).string()});
  targets.push_back({"new", mcp::test::broker_binary()});
  for (const auto& t : targets) std::printf("%s: %s\n", t.name.c_str(), t.binary.c_str());
  std::printf("%u CPUs; journal in memory; CPU = utime + stime of the broker process\n",
              std::thread::hardware_concurrency());
  std::printf("subscribers ask for batched packets, linger %u ms (a broker that predates it sends one packet per message)\n",
              g_linger_ms);

  if (mode == "leaf") {
    if (mcp::test::nats_server_binary().empty()) {
      std::printf("leaf: nats-server is not installed\n");
      return 1;
    }
    std::printf("\nleaf hop: %d agents over %d connections, %.0f ev/s each in batches of %d, for %.1f s, to a "
                "broker on cluster A; subscribers on A's broker and on cluster B's (stream source over a leaf node)\n",
                agents, channels, agent_rate, agent_batch, fanin_seconds);
    const FaninResult r = leaf_hop(targets.back().binary, agents, agent_rate, fanin_seconds, agent_batch, channels);
    std::printf("%-22s %12s %8s %8s %8s %8s\n", "", "events", "p50 ms", "p95 ms", "p99 ms", "max ms");
    std::printf("%-22s %12llu %8.1f %8.1f %8.1f %8.1f\n", "subscriber on A", static_cast<unsigned long long>(r.events_delivered),
                r.p50_ms, r.p95_ms, r.p99_ms, r.max_ms);
    std::printf("%-22s %12llu %8.1f %8.1f %8.1f %8.1f\n", "subscriber on B", static_cast<unsigned long long>(r.remote_events),
                r.remote_p50_ms, r.remote_p95_ms, r.remote_p99_ms, r.remote_max_ms);
    std::printf("%-22s %12s %8.1f %8.1f %8.1f\n", "added by the leaf hop", "", r.remote_p50_ms - r.p50_ms,
                r.remote_p95_ms - r.p95_ms, r.remote_p99_ms - r.p99_ms);
    std::printf("events sent %llu, batches acked %llu/%llu, broker A CPU %.2f s%s%s\n",
                static_cast<unsigned long long>(r.events_sent), static_cast<unsigned long long>(r.batches_acked),
                static_cast<unsigned long long>(r.batches_sent), r.cpu_s, r.error.empty() ? "" : "; ", r.error.c_str());
    return 0;
  }

  if (mode != "fanin") {
    std::printf("\nfan-out: 1 agent at %.0f ev/s in batches of %d for %.1f s (%llu events) to N compact subscribers\n",
                rate, batch, seconds, static_cast<unsigned long long>(std::llround(rate * seconds)));
    std::printf("%-4s %4s %22s %8s %8s %6s %6s %7s %8s %9s %9s %8s %s\n", "", "N", "slowest/expected", "dropped",
                "(Stats)", "lost", "gaps", "wall s", "CPU s", "us/deliv", "VmHWM MiB", "new/old", "");
    for (const int n : subscriber_counts) {
      double old_us = 0;
      for (const auto& t : targets) {
        FanoutResult r;
        try {
          r = fanout(t.binary, n, rate, seconds, batch);
        } catch (const std::exception& e) {
          r.error = e.what();
        }
        const double us = r.deliveries ? r.cpu_s * 1e6 / static_cast<double>(r.deliveries) : 0;
        char delivered[48];
        std::snprintf(delivered, sizeof delivered, "%llu/%llu", static_cast<unsigned long long>(r.slowest),
                      static_cast<unsigned long long>(r.expected));
        std::printf("%-4s %4d %22s %8llu %8llu %6llu %6llu %7.2f %8.2f %9.3f %9.1f %8s %s\n", t.name.c_str(), n,
                    delivered, static_cast<unsigned long long>(r.dropped),
                    static_cast<unsigned long long>(r.broker_dropped), static_cast<unsigned long long>(r.lost),
                    static_cast<unsigned long long>(r.gaps), r.wall_s, r.cpu_s, us, r.mem.hwm_mib,
                    t.name == "new" && targets.size() > 1 ? ratio(us, old_us).c_str() : "", r.error.c_str());
        std::fflush(stdout);
        if (t.name == "old") old_us = us;
      }
    }
  }

  if (mode != "fanout") {
    std::printf("\nfan-in: %d agents over %d connections, %.0f ev/s each in batches of %d, for %.1f s; "
                "1 compact subscriber\n",
                agents, channels, agent_rate, agent_batch, fanin_seconds);
    std::vector<FaninResult> results;
    for (const auto& t : targets) {
      FaninResult r;
      try {
        r = fanin(t.binary, agents, agent_rate, fanin_seconds, agent_batch, channels);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      results.push_back(std::move(r));
    }
    print_fanin(targets, results);
  }
  return 0;
}
