#include "broker/broker.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "broker/dedup_table.h"
#include "broker/downsample.h"
#include "broker/policy_store.h"
#include "broker/subscriber_queue.h"
#include "common/error.h"
#include "common/event.h"
#include "forward/segment_log.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp::broker {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(std::string("cannot read ") + what + " '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

double weight_of(const mcp::v1::Sample& s) {
  if (s.threshold() == 0) return 1.0;
  return 1.0 / threshold_to_probability(s.threshold());
}

struct AgentConn {
  std::mutex write_mu;
  grpc::ServerReaderWriter<mcp::v1::BrokerMessage, mcp::v1::AgentMessage>* stream;
  bool write(const mcp::v1::BrokerMessage& msg) {
    std::lock_guard lock(write_mu);
    return stream->Write(msg);
  }
};

struct Subscriber {
  SubscriptionFilter filter;
  SubscriberQueue queue;
  Subscriber(SubscriptionFilter f, size_t capacity) : filter(std::move(f)), queue(capacity) {}
};

struct ProbeCount {
  uint64_t events = 0;
  double adjusted = 0;
};

}  // namespace

class Broker::Impl final : public mcp::v1::Sampling::Service {
 public:
  explicit Impl(BrokerOptions options)
      : options_(std::move(options)),
        journal_(SegmentLogOptions{
            options_.state_dir.empty() ? std::filesystem::path() : options_.state_dir / "journal",
            4ull << 20,
            options_.state_dir.empty() ? std::min<uint64_t>(options_.journal_max_bytes, 64ull << 20)
                                       : options_.journal_max_bytes}),
        dedup_(options_.state_dir.empty() ? std::filesystem::path()
                                          : options_.state_dir / "agents.json"),
        policies_(options_.state_dir.empty() ? std::filesystem::path()
                                             : options_.state_dir / "policies.json") {
    // A kill between the journal append and the marks file leaves the newest records unmarked.
    for (const auto& record : journal_.newest_segment()) {
      mcp::v1::SamplePacket packet;
      if (packet.ParseFromString(record.payload)) dedup_.accept(packet.agent_id(), packet.sequence());
    }
    start_server();
  }

  ~Impl() override { shutdown(std::chrono::milliseconds(0)); }

  int port() const { return port_; }

  void shutdown(std::chrono::milliseconds grace) {
    std::vector<std::shared_ptr<Subscriber>> subs;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      subs.assign(subscribers_.begin(), subscribers_.end());
    }
    for (auto& s : subs) s->queue.close();
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
  }

  // --- RPCs -------------------------------------------------------------------------------

  Status Publish(ServerContext* ctx,
                 grpc::ServerReaderWriter<mcp::v1::BrokerMessage, mcp::v1::AgentMessage>* stream)
      override {
    if (Status st = check_auth(ctx); !st.ok()) return st;
    mcp::v1::AgentMessage msg;
    if (!stream->Read(&msg)) return Status::OK;
    std::string agent_id;
    if (msg.has_hello()) agent_id = msg.hello().agent_id();
    if (agent_id.empty()) {
      const auto it = ctx->client_metadata().find("x-mcp-agent-id");
      if (it != ctx->client_metadata().end()) agent_id.assign(it->second.data(), it->second.size());
    }
    if (agent_id.empty()) return Status(StatusCode::INVALID_ARGUMENT, "agent id missing");

    auto conn = std::make_shared<AgentConn>();
    conn->stream = stream;
    mcp::v1::BrokerMessage push;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
      agents_.insert(conn);
      for (const auto& p : policies_.list()) *push.mutable_policies()->add_policies() = p;
    }
    spdlog::info("agent {} connected from {}", agent_id, ctx->peer());
    if (push.policies().policies_size() > 0) {
      push.set_broker_hlc(hlc_now());
      conn->write(push);
    }
    mcp::v1::BrokerMessage reply;
    bool ok = true;
    do {
      if (!msg.has_batch()) continue;
      bool duplicate = false;
      try {
        duplicate = !ingest(agent_id, msg.mutable_batch());
      } catch (const std::exception& e) {
        spdlog::error("ingest from {}: {}", agent_id, e.what());
        ok = false;
        break;
      }
      reply.Clear();
      reply.set_broker_hlc(hlc_now());
      reply.mutable_ack()->set_sequence(msg.batch().sequence());
      reply.mutable_ack()->set_duplicate(duplicate);
      if (!conn->write(reply)) break;
    } while (stream->Read(&msg));
    {
      std::lock_guard lock(mu_);
      agents_.erase(conn);
    }
    spdlog::info("agent {} disconnected", agent_id);
    return ok ? Status::OK : Status(StatusCode::INTERNAL, "broker could not store the batch");
  }

  Status Subscribe(ServerContext* ctx, const mcp::v1::SubscriptionRequest* req,
                   grpc::ServerWriter<mcp::v1::SamplePacket>* writer) override {
    if (Status st = check_auth(ctx); !st.ok()) return st;
    if (req->sampling_rate() < 0 || req->sampling_rate() > 1)
      return Status(StatusCode::INVALID_ARGUMENT, "sampling_rate must be in (0, 1]");
    const size_t capacity = req->queue_packets() == 0
                                ? options_.subscriber_queue
                                : std::min<size_t>(req->queue_packets(), options_.subscriber_queue);
    auto sub = std::make_shared<Subscriber>(SubscriptionFilter::from(*req), capacity);
    uint64_t live_from = 0;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
      subscribers_.insert(sub);
      live_from = journal_.stats().next_offset;
    }
    spdlog::info("subscriber {} (service '{}', rate {})", ctx->peer(), req->service_name(),
                 sub->filter.rate);
    uint64_t last = 0;
    mcp::v1::SamplePacket out;
    bool ok = true;
    if (req->resume_after() > 0) {
      uint64_t from = req->resume_after() + 1;
      while (ok && !ctx->IsCancelled()) {
        auto records = journal_.read_from(from, 64);
        bool caught_up = records.empty();
        for (auto& record : records) {
          if (record.offset >= live_from) {
            caught_up = true;
            break;
          }
          from = record.offset + 1;
          mcp::v1::SamplePacket packet;
          if (!packet.ParseFromString(record.payload)) continue;
          packet.set_offset(record.offset);
          if (!filter_packet(packet, sub->filter, &out)) continue;
          if (!(ok = writer->Write(out))) break;
          last = record.offset;
        }
        if (caught_up) break;
      }
    }
    while (ok) {
      PacketPtr packet = sub->queue.pop(std::chrono::milliseconds(200));
      if (!packet) {
        if (ctx->IsCancelled() || sub->queue.closed()) break;
        continue;
      }
      if (packet->offset() <= last) continue;
      last = packet->offset();
      const DropCount dropped = sub->queue.take_dropped();
      if (dropped.packets == 0) {
        ok = writer->Write(*packet);
      } else {
        out = *packet;
        out.set_dropped_packets(dropped.packets);
        out.set_dropped_samples(dropped.samples);
        ok = writer->Write(out);
      }
    }
    const DropCount total = sub->queue.total_dropped();
    {
      std::lock_guard lock(mu_);
      subscribers_.erase(sub);
      subscriber_dropped_ += total.packets;
    }
    spdlog::info("subscriber {} left ({} packets dropped)", ctx->peer(), total.packets);
    return Status::OK;
  }

  Status ApplyPolicy(ServerContext* ctx, const mcp::v1::Policy* req,
                     mcp::v1::ApplyPolicyReply* reply) override {
    if (Status st = check_auth(ctx); !st.ok()) return st;
    std::vector<std::shared_ptr<AgentConn>> agents;
    mcp::v1::BrokerMessage push;
    try {
      std::lock_guard lock(mu_);
      *reply->mutable_stored() = policies_.apply(*req);
      agents.assign(agents_.begin(), agents_.end());
    } catch (const Error& e) {
      return Status(e.code() == ExitCode::kUsage ? StatusCode::INVALID_ARGUMENT
                                                 : StatusCode::INTERNAL,
                    e.what());
    }
    *push.mutable_policies()->add_policies() = reply->stored();
    push.set_broker_hlc(hlc_now());
    uint32_t pushed = 0;
    for (auto& a : agents) pushed += a->write(push) ? 1 : 0;
    reply->set_pushed_to_agents(pushed);
    spdlog::info("policy service='{}' probe='{}' rate={} qps={} pushed to {} agents", req->service(),
                 req->probe(), req->sampling_rate(), req->target_qps(), pushed);
    return Status::OK;
  }

  Status ListPolicies(ServerContext* ctx, const mcp::v1::ListPoliciesRequest*,
                      mcp::v1::PolicyList* reply) override {
    if (Status st = check_auth(ctx); !st.ok()) return st;
    std::lock_guard lock(mu_);
    for (const auto& p : policies_.list()) *reply->add_policies() = p;
    return Status::OK;
  }

  Status Stats(ServerContext* ctx, const mcp::v1::StatsRequest*,
               mcp::v1::StatsReply* reply) override {
    if (Status st = check_auth(ctx); !st.ok()) return st;
    std::lock_guard lock(mu_);
    for (const auto& [key, count] : probe_counts_) {
      auto* p = reply->add_probes();
      p->set_service(key.first);
      p->set_probe(key.second);
      p->set_events(count.events);
      p->set_adjusted_count(count.adjusted);
    }
    reply->set_batches(batches_);
    reply->set_duplicate_batches(duplicates_);
    reply->set_agents_connected(static_cast<uint32_t>(agents_.size()));
    reply->set_subscribers(static_cast<uint32_t>(subscribers_.size()));
    uint64_t dropped = subscriber_dropped_;
    for (const auto& s : subscribers_) dropped += s->queue.total_dropped().packets;
    reply->set_subscriber_dropped_packets(dropped);
    return Status::OK;
  }

 private:
  void start_server() {
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
      if (options_.tls_cert.empty() || options_.tls_key.empty())
        throw usage_error("TLS needs both --tls-cert and --tls-key");
      grpc::SslServerCredentialsOptions ssl(
          options_.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      if (!options_.tls_ca.empty()) ssl.pem_root_certs = read_file(options_.tls_ca, "TLS CA");
      ssl.pem_key_cert_pairs.push_back({read_file(options_.tls_key, "TLS key"),
                                        read_file(options_.tls_cert, "TLS certificate")});
      creds = grpc::SslServerCredentials(ssl);
    } else if (!options_.tls_ca.empty()) {
      throw usage_error("--tls-ca on the broker needs --tls-cert and --tls-key");
    } else {
      creds = grpc::InsecureServerCredentials();
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen, creds, &port_);
    builder.RegisterService(this);
    builder.SetMaxReceiveMessageSize(64 << 20);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) throw runtime_error("cannot listen on " + options_.listen);
  }

  Status check_auth(ServerContext* ctx) const {
    if (options_.token.empty()) return Status::OK;
    const auto& md = ctx->client_metadata();
    const auto it = md.find("authorization");
    if (it != md.end() && std::string_view(it->second.data(), it->second.size()) ==
                              "Bearer " + options_.token)
      return Status::OK;
    return Status(StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
  }

  uint64_t hlc_now() {
    uint64_t now = unix_ns();
    uint64_t prev = hlc_.load();
    while (!hlc_.compare_exchange_weak(prev, std::max(now, prev + 1))) {
    }
    return std::max(now, prev + 1);
  }

  // Returns false for a duplicate. Runs under mu_ so journal order is delivery order.
  bool ingest(const std::string& agent_id, mcp::v1::Batch* batch) {
    const uint64_t seq = batch->sequence();
    std::lock_guard lock(mu_);
    if (!dedup_.accept(agent_id, seq)) {
      ++duplicates_;
      return false;
    }
    auto packet = std::make_shared<mcp::v1::SamplePacket>();
    packet->set_agent_id(agent_id);
    packet->set_sequence(seq);
    packet->mutable_samples()->Swap(batch->mutable_samples());
    uint32_t index = 0;
    for (auto& s : *packet->mutable_samples()) {
      if (s.agent_id().empty()) s.set_agent_id(agent_id);
      if (s.event_id() == 0) s.set_event_id(event_id_for(agent_id, seq, index));
      ++index;
      ProbeCount& c = probe_counts_[{s.service(), s.probe()}];
      ++c.events;
      c.adjusted += weight_of(s);
    }
    const uint64_t offset =
        journal_.append(packet->SerializeAsString(), static_cast<uint32_t>(packet->samples_size()));
    dedup_.persist();
    packet->set_offset(offset);
    packet->set_broker_hlc(hlc_now());
    ++batches_;
    PacketPtr shared = std::move(packet);
    for (const auto& sub : subscribers_) {
      if (sub->filter.passes_everything()) {
        sub->queue.push(shared);
        continue;
      }
      auto filtered = std::make_shared<mcp::v1::SamplePacket>();
      if (filter_packet(*shared, sub->filter, filtered.get())) sub->queue.push(std::move(filtered));
    }
    return true;
  }

  BrokerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<uint64_t> hlc_{0};

  std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  SegmentLog journal_;
  DedupTable dedup_;
  PolicyStore policies_;
  std::set<std::shared_ptr<AgentConn>> agents_;
  std::set<std::shared_ptr<Subscriber>> subscribers_;
  std::map<std::pair<std::string, std::string>, ProbeCount> probe_counts_;
  uint64_t batches_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t subscriber_dropped_ = 0;
};

Broker::Broker(BrokerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Broker::~Broker() = default;
int Broker::port() const { return impl_->port(); }
void Broker::shutdown(std::chrono::milliseconds grace) { impl_->shutdown(grace); }

}  // namespace mcp::broker
