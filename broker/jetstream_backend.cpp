// The JetStream backend (backend.h) over NatsBackend (nats_backend.h): batches are acked once
// JetStream stored them (dedup by the JetStream message id instead of local marks), subscribers
// get what every broker published (offsets are stream sequences; a slow subscriber is slowed by
// flow control instead of losing its oldest packets, so queue_packets does not apply), and
// policies live in a key-value bucket watched by every broker. No journal is built or read.
#include <atomic>

#include <spdlog/spdlog.h>

#include "broker/backend.h"
#include "broker/broker.h"
#include "broker/nats_backend.h"
#include "broker/packet_forms.h"
#include "common/error.h"

namespace mcp::broker {
namespace {

using grpc::Status;
using grpc::StatusCode;

class JetStreamBackend final : public Backend {
 public:
  JetStreamBackend(const BrokerOptions& options, PolicyListener push)
      : async_(options.nats.async_publish), nats_(options.nats, std::move(push)) {}

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

  bool pipelined() const override { return async_; }

  void store_async(PreparedBatch& batch, StoreDone done) override {
    nats_.publish_async(*batch.packet, batch.block.get(),
                        [done = std::move(done)](const PublishOutcome& outcome, const std::string& error) {
                          done(outcome.duplicate, error);
                        });
  }

  Status subscribe(grpc::ServerContext* ctx, const mcp::v1::SubscriptionRequest& req,
                   grpc::ServerWriter<mcp::v1::SamplePacket>* writer) override {
    const SubscriptionFilter filter = SubscriptionFilter::from(req);
    std::unique_ptr<NatsBackend::Feed> feed;
    try {
      feed = nats_.subscribe(filter.service, req.resume_after());
    } catch (const Error& e) {
      return Status(StatusCode::UNAVAILABLE, e.what());
    }
    if (stop_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
    ++subscribers_;
    spdlog::info("subscriber {} (service '{}', rate {}{}) on JetStream", ctx->peer(),
                 req.service_name(), filter.rate, req.compact() ? ", compact" : "");
    Status status = Status::OK;
    while (!stop_ && !ctx->IsCancelled()) {
      std::unique_ptr<mcp::v1::SamplePacket> packet;
      try {
        packet = feed->next(std::chrono::milliseconds(200));
      } catch (const Error& e) {
        status = Status(StatusCode::UNAVAILABLE, e.what());  // the client resumes elsewhere
        break;
      }
      if (!packet) continue;
      PacketForms forms(std::move(packet));
      const PacketPtr p = forms.for_subscriber(filter, req.compact());
      if (p && !writer->Write(*p)) break;
    }
    --subscribers_;
    spdlog::info("subscriber {} left{}", ctx->peer(), status.ok() ? "" : ": " + status.error_message());
    return status;
  }

  uint32_t subscribers() const override { return subscribers_.load(); }
  uint64_t subscriber_dropped_packets() const override { return 0; }  // flow control, no drops

  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) override {
    return nats_.apply_policy(policy, pushed);
  }
  std::vector<mcp::v1::Policy> policies() const override { return nats_.policies(); }
  bool remove_policy(const PolicyKey& key) override {
    return nats_.remove_policy(key);
  }

  void stop() override { stop_ = true; }

 private:
  const bool async_;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> subscribers_{0};
  NatsBackend nats_;
};

}  // namespace

std::unique_ptr<Backend> make_jetstream_backend(const BrokerOptions& options,
                                                Backend::PolicyListener push) {
  if (!options.state_dir.empty())
    throw usage_error("--state-dir does not apply with --backend: JetStream keeps the state");
  return std::make_unique<JetStreamBackend>(options, std::move(push));
}

}  // namespace mcp::broker
