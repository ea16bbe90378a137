// The broker's wiring: the Sampling service's RPCs over its parts. Access (access.h) decides who
// may call, PublishStream (publish_stream.h) runs each agent's stream through ingest.h's checks
// into the backend (backend.h), SubscriptionStream (subscription_stream.h) each subscriber's,
// IngestStats (ingest_stats.h) counts, PolicyFanout (policy_fanout.h) pushes policies,
// OtlpHandoff (otlp_handoff.h) exports and GrpcEndpoint (grpc_endpoint.h) serves.
#include "broker/broker.h"

#include <grpcpp/grpcpp.h>

#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "broker/store/backend.h"
#include "broker/net/grpc_endpoint.h"
#include "broker/ingest/ingest.h"
#include "broker/ingest/ingest_stats.h"
#include "broker/otlp_handoff.h"
#include "broker/policy/policy_fanout.h"
#include "broker/publish_stream.h"
#include "broker/subscription_stream.h"
#include "broker/fanout/wake_timer.h"
#include "clock/hlc.h"
#include "common/error.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp::broker {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

// A Subscribe refused before it starts.
class RefusedSubscription final : public grpc::ServerWriteReactor<mcp::v1::SamplePacket> {
 public:
  explicit RefusedSubscription(Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

BrokerOptions with_clock(BrokerOptions options) {
  options.clock = clock::clock_or_system(std::move(options.clock));
  return options;
}

}  // namespace

// Publish (over raw bytes) and Subscribe on the callback API: no thread per stream; the unary
// RPCs stay synchronous.
using SamplingService = mcp::v1::Sampling::WithRawCallbackMethod_Publish<
    mcp::v1::Sampling::WithCallbackMethod_Subscribe<mcp::v1::Sampling::Service>>;

class Broker::Impl final : public SamplingService, public PublishHost {
 public:
  explicit Impl(BrokerOptions options)
      : options_(with_clock(std::move(options))),
        access_(options_.tokens, options_.review_token),
        stats_(options_.max_probe_series),
        otlp_(options_.otlp) {
    if (options_.tokens.empty() && !options_.review_token && options_.tls_ca.empty() && !options_.insecure &&
        !is_loopback_listen(options_.listen))
      throw usage_error("refusing to listen on " + options_.listen +
                        " without authentication: give --token-file (or a role token file) or "
                        "--tls-ca, or --insecure");
    const Backend::PolicyListener push = [this](const mcp::v1::Policy& p) { return push_policy(p); };
    backend_ = options_.nats.servers.empty() ? make_embedded_backend(options_, push)
                                             : make_jetstream_backend(options_, push);
    endpoint_ = std::make_unique<GrpcEndpoint>(options_, this);
  }

  ~Impl() override { shutdown(std::chrono::milliseconds(0)); }

  int port() const { return endpoint_->port(); }

  void shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      // Each subscription drains what is queued and ends; under mu_, so none is deleted meanwhile.
      for (auto* s : subscriptions_) s->queue().close();
    }
    fanout_.close();
    backend_->stop();
    endpoint_->stop(grace);
    otlp_.shutdown(grace);
  }

  std::optional<otlp::ExporterStats> otlp_stats() const { return otlp_.stats(); }
  ListenerHealth health() const { return endpoint_->health(); }
  Backend& backend() { return *backend_; }
  std::map<PolicyKey, std::vector<std::string>> policy_refusals() const { return fanout_.refusals(); }

  // The Stats reply without the access check: for the RPC and for /metrics.
  void fill_stats(mcp::v1::StatsReply* reply) const {
    stats_.fill(reply);
    reply->set_agents_connected(static_cast<uint32_t>(fanout_.agents()));
    std::lock_guard lock(mu_);
    uint64_t dropped = subscriber_dropped_;
    for (auto* s : subscriptions_) dropped += s->queue().total_dropped().packets;
    reply->set_subscribers(static_cast<uint32_t>(subscriptions_.size()));
    reply->set_subscriber_dropped_packets(dropped);
  }

  // --- RPCs -------------------------------------------------------------------------------

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Publish(grpc::CallbackServerContext* ctx) override {
    auto stream = std::make_shared<PublishStream>(this, ctx);
    stream->start();
    return stream.get();
  }

  grpc::ServerWriteReactor<mcp::v1::SamplePacket>* Subscribe(grpc::CallbackServerContext* ctx,
                                                            const mcp::v1::SubscriptionRequest* req) override {
    if (Status st = access_.check(*ctx, kSubscribe); !st.ok()) return new RefusedSubscription(st);
    if (!(req->sampling_rate() >= 0 && req->sampling_rate() <= 1))  // NaN too
      return new RefusedSubscription(Status(StatusCode::INVALID_ARGUMENT, "sampling_rate must be in (0, 1]"));
    const size_t capacity = req->queue_packets() == 0
                                ? options_.subscriber_queue
                                : std::min<size_t>(req->queue_packets(), options_.subscriber_queue);
    auto* stream = SubscriptionStream::create(ctx, capacity, [this](SubscriptionStream* done) {
      const uint64_t dropped = done->queue().total_dropped().packets;
      std::lock_guard lock(mu_);
      subscriptions_.erase(done);
      subscriber_dropped_ += dropped;
      spdlog::info("subscriber {} left ({} packets dropped)", done->peer(), dropped);
    });
    {
      std::lock_guard lock(mu_);
      if (stopping_) {
        delete stream;
        return new RefusedSubscription(Status(StatusCode::UNAVAILABLE, "broker stopping"));
      }
      subscriptions_.insert(stream);
    }
    stream->start(*req, *backend_, wake_timer_, options_.subscriber_linger_max);
    return stream;
  }

  Status ApplyPolicy(ServerContext* ctx, const mcp::v1::Policy* req, mcp::v1::ApplyPolicyReply* reply) override {
    if (Status st = access_.check(*ctx, kPolicy); !st.ok()) return st;
    try {
      uint32_t pushed = 0;
      *reply->mutable_stored() = backend_->apply_policy(*req, &pushed);
      reply->set_pushed_to_agents(pushed);
      spdlog::info("policy service='{}' probe='{}' rate={} qps={} stored, pushed to {} agents here", req->service(),
                   req->probe(), req->sampling_rate(), req->target_qps(), pushed);
      return Status::OK;
    } catch (const Error& e) {
      return Status(e.code() == ExitCode::kUsage ? StatusCode::INVALID_ARGUMENT : StatusCode::UNAVAILABLE, e.what());
    }
  }

  Status ListPolicies(ServerContext* ctx, const mcp::v1::ListPoliciesRequest*, mcp::v1::PolicyList* reply) override {
    if (Status st = access_.check(*ctx, 0); !st.ok()) return st;
    for (const auto& p : backend_->policies()) *reply->add_policies() = p;
    return Status::OK;
  }

  Status Stats(ServerContext* ctx, const mcp::v1::StatsRequest*, mcp::v1::StatsReply* reply) override {
    if (Status st = access_.check(*ctx, 0); !st.ok()) return st;
    fill_stats(reply);
    return Status::OK;
  }

  // --- PublishHost: what an agent's stream asks of the broker --------------------------------

  const PublishLimits& limits() const override { return options_.limits; }

  Status authenticate(const grpc::ServerContextBase& ctx, std::string* credential) override {
    return access_.check(ctx, kPublish, credential);
  }

  Status admit(const std::string& agent_id, const std::string& credential) override {
    if (Status st = Access::check_publisher(credential, agent_id); !st.ok()) return st;
    return backend_->admit(agent_id, credential);
  }

  bool join(std::shared_ptr<PublishStream> stream, mcp::v1::BrokerMessage* full_set) override {
    if (!fanout_.join(std::move(stream))) return false;
    full_set->mutable_policies()->set_full_set(true);
    full_set->mutable_policies()->set_accepts_policy_status(true);
    for (const auto& p : backend_->policies()) *full_set->mutable_policies()->add_policies() = p;
    full_set->set_broker_hlc(hlc_now());
    return true;
  }

  void leave(const PublishStream* stream) override { fanout_.leave(stream); }

  Status take(const PublishStream* stream, const std::string& agent_id, uint64_t incarnation,
              mcp::v1::AgentMessage& msg, PreparedBatch* prepared) override {
    Status status = check_message(agent_id, incarnation, msg, options_.limits);
    if (status.ok() && msg.has_batch()) status = backend_->check_sequence(agent_id, incarnation, msg.batch().sequence());
    if (status.ok() && msg.has_batch()) {
      uint64_t newest = 0;
      status = prepare_batch(agent_id, incarnation, options_.limits, msg.mutable_batch(), prepared, &newest);
      if (status.ok() && newest) hlc_.merge(newest, unix_ns());
    }
    if (status.ok() && msg.has_policy_status()) fanout_.set_refusals(stream, agent_id, msg.policy_status());
    return status;
  }

  void refuse_batch(const std::string& agent_id, uint64_t sequence, const Status& why, mcp::v1::Ack* ack) override {
    stats_.refused();
    spdlog::warn("agent {}: batch {} refused: {}", agent_id, sequence, why.error_message());
    ack->set_sequence(sequence);
    ack->set_refused(true);
    ack->set_reason(why.error_message());
  }

  // Counts the batch in Stats once stored (the embedded backend: before its subscribers can see
  // it, so Stats never lags them) and hands a new one to OTLP; `done` runs inline for the
  // embedded backend, on a backend thread when pipelined.
  void store(const std::string& agent_id, const std::string& credential, const otlp::Origin& origin,
             PreparedBatch& prepared, Stored done) override {
    prepared.packet->set_broker_hlc(hlc_now());
    ProbeTotals counts = IngestStats::count(*prepared.packet, prepared.block.get());
    const auto settle = [this, exported = prepared, origin](bool duplicate) {  // the shared packet and block
      if (duplicate)
        stats_.duplicate();
      else
        otlp_.offer(exported, origin);
    };
    if (!backend_->pipelined()) {
      bool duplicate = false;
      Status st;
      try {
        st = backend_->store(agent_id, credential, prepared, &duplicate, [&] { stats_.stored(counts); });
      } catch (const std::exception& e) {
        spdlog::error("ingest from {}: {}", agent_id, e.what());
        st = Status(StatusCode::INTERNAL, "broker could not store the batch");
      }
      if (st.ok()) settle(duplicate);
      done(duplicate, st);
      return;
    }
    const uint64_t sequence = prepared.packet->sequence();
    backend_->store_async(prepared, [this, counts = std::move(counts), settle, sequence,
                                     done = std::move(done)](bool duplicate, const std::string& error) {
      if (!error.empty()) {
        spdlog::error("publish of batch {}: {}", sequence, error);
        done(duplicate, Status(StatusCode::UNAVAILABLE, "store: " + error));
        return;
      }
      if (!duplicate) stats_.stored(counts);
      settle(duplicate);
      done(duplicate, Status::OK);
    });
  }

  void count_refusal() override { stats_.refused(); }

  // The broker's hybrid logical clock (packed, as the agents'): it merges every batch's newest
  // event stamp, so what it sends back (acks, pushes, packets) is ordered after what it
  // received, whatever the nodes' wall clocks say.
  uint64_t hlc_now() override { return hlc_.now(unix_ns()); }

 private:
  uint64_t unix_ns() const { return static_cast<uint64_t>(options_.clock->realtime_ns()); }

  // Called by the backend for every stored policy (JetStream: every change in the bucket, from
  // any broker).
  uint32_t push_policy(const mcp::v1::Policy& policy) {
    mcp::v1::BrokerMessage push;
    *push.mutable_policies()->add_policies() = policy;
    push.set_broker_hlc(hlc_now());
    return fanout_.push(push);
  }

  const BrokerOptions options_;
  const Access access_;
  IngestStats stats_;
  PolicyFanout fanout_;
  OtlpHandoff otlp_;
  clock::Hlc hlc_;
  std::unique_ptr<GrpcEndpoint> endpoint_;

  mutable std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  std::set<SubscriptionStream*> subscriptions_;
  uint64_t subscriber_dropped_ = 0;  // by subscriptions that ended

  WakeTimer wake_timer_{options_.clock};  // lingering subscriptions' wake-ups
  // Last: destroyed first, so its threads (JetStream's policy watcher) never call push_policy
  // on a dismantled broker.
  std::unique_ptr<Backend> backend_;
};

Broker::Broker(BrokerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Broker::~Broker() = default;
int Broker::port() const { return impl_->port(); }
mcp::v1::StatsReply Broker::stats() const {
  mcp::v1::StatsReply reply;
  impl_->fill_stats(&reply);
  return reply;
}
void Broker::shutdown(std::chrono::milliseconds grace) { impl_->shutdown(grace); }
std::optional<otlp::ExporterStats> Broker::otlp_stats() const { return impl_->otlp_stats(); }
ListenerHealth Broker::health() const { return impl_->health(); }
mcp::v1::Policy Broker::apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) {
  return impl_->backend().apply_policy(policy, pushed);
}
bool Broker::remove_policy(const PolicyKey& key) { return impl_->backend().remove_policy(key); }
std::vector<mcp::v1::Policy> Broker::policies() const { return impl_->backend().policies(); }
std::map<PolicyKey, std::vector<std::string>> Broker::policy_refusals() const { return impl_->policy_refusals(); }

}  // namespace mcp::broker
