// The JetStream backend (backend.h) over JetStreamClient (jetstream_client.h): batches are acked once
// JetStream stored them (dedup by the JetStream message id instead of local marks), subscribers
// get what every broker published (offsets are stream sequences; a slow subscriber is slowed by
// flow control instead of losing its oldest packets: a full queue holds the consumer back), and
// policies live in a key-value bucket watched by every broker. No journal is built or read.
#include <atomic>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "broker/store/backend.h"
#include "broker/options.h"
#include "broker/store/dedup_table.h"
#include "broker/store/jetstream_client.h"
#include "broker/fanout/packet_forms.h"
#include "clock/clock_source.h"
#include "common/error.h"

namespace mcp::broker {
namespace {

using grpc::Status;
using grpc::StatusCode;

class JetStreamBackend final : public Backend {
 public:
  JetStreamBackend(const BrokerOptions& options, PolicyListener push)
      : clock_(clock::clock_or_system(options.clock)),
        async_(options.nats.async_publish),
        agent_expiry_(options.agent_expiry),
        nats_(options.nats, std::move(push), clock_) {}

  // An agent id is bound to the credential that first published it, in a bucket every broker
  // shares (dedup is by message id, so no sequence mark can be poisoned; the binding keeps
  // another agent from publishing, or pre-empting message ids, under this one's id).
  Status admit(const std::string& agent_id, const std::string& credential) override {
    try {
      if (nats_.bind_agent(agent_id, credential))
        return Status(StatusCode::PERMISSION_DENIED, "agent id '" + agent_id + "' is bound to another credential");
    } catch (const Error& e) {
      return Status(StatusCode::UNAVAILABLE, e.what());
    }
    return Status::OK;
  }

  // No lock while publishing, so agents publish in parallel; JetStream orders them.
  Status store(const std::string&, const std::string&, PreparedBatch& batch, bool* duplicate,
               const std::function<void()>& on_stored) override {
    *duplicate = nats_.publish(*batch.packet, batch.block.get()).duplicate;  // throws when not acked in time
    if (!*duplicate) on_stored();
    return Status::OK;
  }

  // The embedded window, shared: marks live in this broker's DedupTable (memory), seeded from
  // the agent bucket when an (agent, incarnation) is first seen here and written back when it
  // is new and every kMarkStride batches after. A mark read from the bucket lags the true one by
  // less than kMarkStride, far inside the window, so an agent that fails over to another broker
  // is never refused, and a forged start or jump is refused by every broker. Duplicates are left
  // to JetStream's message ids.
  Status check_sequence(const std::string& agent_id, uint64_t incarnation, uint64_t sequence) override {
    static constexpr uint64_t kMarkStride = uint64_t{1} << 16;
    const uint64_t now_us = unix_us(*clock_);
    try {
      std::unique_lock lock(marks_mu_);
      if (++checks_ % kMarkStride == 0) marks_.expire(now_us, agent_expiry_);
      if (marks_.high_water(agent_id, incarnation) == 0) {  // not seen here (or forgotten)
        lock.unlock();
        const uint64_t stored = nats_.load_mark(agent_id, incarnation);
        lock.lock();
        if (stored != 0) marks_.advance(agent_id, incarnation, stored, now_us);
      }
      const uint64_t before = marks_.high_water(agent_id, incarnation);
      switch (marks_.check(agent_id, incarnation, "", sequence, now_us)) {
        case Admission::kBeyondWindow:
          return Status(StatusCode::INVALID_ARGUMENT,
                        "sequence " + std::to_string(sequence) + " is too far past the last stored " +
                            std::to_string(before) + " of this agent's incarnation (see 'Broker limits')");
        case Admission::kDuplicate:
          return Status::OK;
        // These marks are a cache of the agent bucket's and JetStream dedups by message id: an
        // evicted mark costs a read of the bucket, never a duplicate, so nothing is refused.
        case Admission::kIncarnationsInUse:
        default:
          break;
      }
      marks_.record(agent_id, incarnation, "", sequence, now_us);
      if (before == 0 || before / kMarkStride != sequence / kMarkStride) {
        lock.unlock();
        nats_.store_mark(agent_id, incarnation, sequence);
      }
    } catch (const Error& e) {
      return Status(StatusCode::UNAVAILABLE, e.what());
    }
    return Status::OK;
  }

  bool pipelined() const override { return async_; }

  void store_async(PreparedBatch& batch, StoreDone done) override {
    nats_.publish_async(*batch.packet, batch.block.get(),
                        [done = std::move(done)](const PublishOutcome& outcome, const std::string& error) {
                          done(outcome.duplicate, error);
                        });
  }

  // A consumer's messages are read by a thread of the subscription's own (libnats 3.4 has no
  // pull consumer with a callback), which waits for room in the queue: flow control, not drops.
  Status subscribe(const mcp::v1::SubscriptionRequest& req, const std::string& peer,
                   std::shared_ptr<SubscriberQueue> queue, Metadata*,
                   std::unique_ptr<Subscription>* out) override {
    const SubscriptionFilter filter = SubscriptionFilter::from(req);
    std::unique_ptr<JetStreamClient::Feed> feed;
    try {
      feed = nats_.subscribe(filter.service, req.resume_after());
    } catch (const Error& e) {
      return Status(StatusCode::UNAVAILABLE, e.what());
    }
    if (stop_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
    spdlog::info("subscriber {} (service '{}', rate {}{}) on JetStream", peer, req.service_name(),
                 filter.rate, req.compact() ? ", compact" : "");
    *out = std::make_unique<Reader>(std::move(feed), filter, req.compact(), std::move(queue));
    return Status::OK;
  }

  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) override {
    return nats_.apply_policy(policy, pushed);
  }
  std::vector<mcp::v1::Policy> policies() const override { return nats_.policies(); }
  bool remove_policy(const PolicyKey& key) override {
    return nats_.remove_policy(key);
  }

  void stop() override { stop_ = true; }

 private:
  class Reader final : public Subscription {
   public:
    Reader(std::unique_ptr<JetStreamClient::Feed> feed, SubscriptionFilter filter, bool compact,
           std::shared_ptr<SubscriberQueue> queue)
        : feed_(std::move(feed)), filter_(std::move(filter)), compact_(compact), queue_(std::move(queue)),
          thread_([this] { run(); }) {}
    ~Reader() override {
      queue_->close();  // ends a push_wait
      thread_.join();
    }

   private:
    void run() {
      while (!queue_->closed()) {
        std::unique_ptr<mcp::v1::SamplePacket> packet;
        try {
          packet = feed_->next(std::chrono::milliseconds(200));
        } catch (const Error& e) {
          queue_->close(Status(StatusCode::UNAVAILABLE, e.what()));  // the client resumes elsewhere
          return;
        }
        if (!packet) continue;
        PacketForms forms(std::move(packet));
        uint64_t n = 0;
        if (PacketPtr p = forms.for_subscriber(filter_, compact_, &n)) queue_->push_wait(std::move(p), n);
      }
    }

    std::unique_ptr<JetStreamClient::Feed> feed_;
    const SubscriptionFilter filter_;
    const bool compact_;
    const std::shared_ptr<SubscriberQueue> queue_;
    std::thread thread_;  // last: starts once the rest is built
  };

  const std::shared_ptr<clock::ClockSource> clock_;  // BrokerOptions::clock: the marks' now_us, policy stamps
  const bool async_;
  const std::chrono::seconds agent_expiry_;
  std::mutex marks_mu_;  // guards marks_ and checks_
  DedupTable marks_;     // in memory: sequence marks only (bindings are bind_agent's)
  uint64_t checks_ = 0;
  std::atomic<bool> stop_{false};
  JetStreamClient nats_;
};

}  // namespace

std::unique_ptr<Backend> make_jetstream_backend(const BrokerOptions& options,
                                                Backend::PolicyListener push) {
  if (!options.state_dir.empty())
    throw usage_error("--state-dir does not apply with --backend: JetStream keeps the state");
  return std::make_unique<JetStreamBackend>(options, std::move(push));
}

}  // namespace mcp::broker
