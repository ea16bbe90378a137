#include "broker/broker.h"

#include <grpcpp/grpcpp.h>
#include <grp.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <condition_variable>
#include <deque>
#include <thread>
#include <map>
#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "broker/backend.h"
#include "broker/downsample.h"
#include "broker/event_block.h"
#include "broker/subscription_stream.h"
#include "clock/hlc.h"
#include "clock/unix_time.h"
#include "common/call_error.h"
#include "common/error.h"
#include "common/event.h"
#include "common/text_file.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "otlp/mapping.h"

namespace mcp::broker {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

using clock::unix_ns;

// Publish is served over raw bytes (Impl's base class) so a message is bounded before it is
// parsed; replies are serialised here.
grpc::ByteBuffer to_buffer(const mcp::v1::BrokerMessage& msg) {
  grpc::Slice slice(msg.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// check_batch() refuses threshold 0, so the weight is finite.
double weight_of(const mcp::v1::Sample& s) { return 1.0 / threshold_to_probability(s.threshold()); }

Status to_status(const Verdict& v) {
  switch (v.code) {
    case Verdict::kOk: return Status::OK;
    case Verdict::kTooLarge: return Status(StatusCode::RESOURCE_EXHAUSTED, v.reason);
    case Verdict::kUnsupported: return Status(StatusCode::FAILED_PRECONDITION, v.reason);
    case Verdict::kInvalid: break;
  }
  return Status(StatusCode::INVALID_ARGUMENT, v.reason);
}

// An AgentMessage as read: bounded on the wire first (scan_agent_message), parsed after. The
// refusal for the client when it is not one.
Status decode_agent_message(grpc::ByteBuffer& buffer, const PublishLimits& limits,
                            mcp::v1::AgentMessage* msg, size_t* wire_bytes) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Status(StatusCode::INVALID_ARGUMENT, "unreadable message");
  std::string wire;
  wire.reserve(buffer.Length());
  for (const auto& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  buffer.Clear();
  *wire_bytes = wire.size();
  if (const Verdict v = scan_agent_message(wire, limits); !v.ok()) return to_status(v);
  if (!msg->ParseFromString(wire))
    return Status(StatusCode::INVALID_ARGUMENT, "not a valid AgentMessage (a string field that is not UTF-8?)");
  if (!msg->has_hello() && !msg->has_batch() && !msg->has_policy_status())
    return Status(StatusCode::INVALID_ARGUMENT, "AgentMessage with neither hello, batch nor policy_status");
  return Status::OK;
}

// A refused Publish (bad or hostile input, a capability this broker lacks) is counted.
bool is_refusal(const Status& status) {
  switch (status.error_code()) {
    case StatusCode::INVALID_ARGUMENT:
    case StatusCode::RESOURCE_EXHAUSTED:
    case StatusCode::FAILED_PRECONDITION:
    case StatusCode::PERMISSION_DENIED:
    case StatusCode::UNAUTHENTICATED:
      return true;
    default:
      return false;
  }
}

// A Subscribe refused before it starts.
class RefusedSubscription final : public grpc::ServerWriteReactor<mcp::v1::SamplePacket> {
 public:
  explicit RefusedSubscription(Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

struct ProbeCount {
  uint64_t events = 0;
  double adjusted = 0;
  double errors = 0;       // adjusted count of the events whose call failed (marks_error)
  uint64_t seen = 0;       // from the agents' ProbeCounts
  double corrected = 0;
};

using ProbeTotals = std::map<std::pair<std::string, std::string>, ProbeCount>;

// The agents' per-interval kernel counters in a packet, summed into per-probe totals.
void add_interval_counts(const mcp::v1::SamplePacket& packet, ProbeTotals& totals) {
  for (const auto& pc : packet.counts()) {
    if (!std::isfinite(pc.estimate()) || pc.estimate() < 0) continue;  // not a count: ignored
    ProbeCount& c = totals[{pc.service(), pc.probe()}];
    c.seen += pc.seen();
    c.corrected += pc.estimate();
  }
}

// A batch's events (compact block or v1 samples) and interval counters, into per-probe totals.
// A block is counted per (service, probe) dictionary index first, strings looked up once each.
void count_events(const mcp::v1::SamplePacket& stored, const mcp::v1::EventBlock* block,
                  ProbeTotals& totals) {
  if (block != nullptr) {
    std::map<std::pair<uint32_t, uint32_t>, ProbeCount> by_index;
    for (const auto& e : block->events()) {
      ProbeCount& c = by_index[{e.service(), e.probe()}];
      ++c.events;
      const double w = 1.0 / threshold_to_probability(e.threshold());  // checked: non-zero
      c.adjusted += w;
      if (otlp::marks_error(e)) c.errors += w;
    }
    for (const auto& [key, c] : by_index) {
      ProbeCount& total = totals[{block_string(*block, key.first), block_string(*block, key.second)}];
      total.events += c.events;
      total.adjusted += c.adjusted;
      total.errors += c.errors;
    }
  }
  for (const auto& s : stored.samples()) {
    ProbeCount& c = totals[{s.service(), s.probe()}];
    ++c.events;
    c.adjusted += weight_of(s);
    if (mcp::marks_error(s.kind() == "cuda" ? EventKind::kCuda : EventKind::kSyscall, s.has_ret(), s.ret()))
      c.errors += weight_of(s);
  }
  add_interval_counts(stored, totals);
}

// The pair that (service, probe) pairs past the bound are counted under.
const std::pair<std::string, std::string> kOtherProbes{"_other", "_other"};

// Adds a batch's totals to the broker's. Agents name services and probes, so the number of
// distinct pairs (Stats entries, /metrics series) is bounded: a new pair past `max_pairs` is
// counted under kOtherProbes, and its events in *overflow.
void add_totals(const ProbeTotals& from, ProbeTotals& to, size_t max_pairs, uint64_t* overflow) {
  for (const auto& [key, c] : from) {
    auto it = to.find(key);
    if (it == to.end()) {
      if (to.size() < max_pairs) {
        it = to.emplace(key, ProbeCount{}).first;
      } else {
        it = to.try_emplace(kOtherProbes).first;
        *overflow += c.events;
      }
    }
    ProbeCount& total = it->second;
    total.events += c.events;
    total.adjusted += c.adjusted;
    total.errors += c.errors;
    total.seen += c.seen;
    total.corrected += c.corrected;
  }
}

}  // namespace

// Publish (over raw bytes) and Subscribe on the callback API: no thread per stream; the unary
// RPCs stay synchronous.
using SamplingService = mcp::v1::Sampling::WithRawCallbackMethod_Publish<
    mcp::v1::Sampling::WithCallbackMethod_Subscribe<mcp::v1::Sampling::Service>>;

class Broker::Impl final : public SamplingService {
  class PublishStream;

 public:
  explicit Impl(BrokerOptions options)
      : options_(std::move(options)) {
    if (options_.tokens.empty() && !options_.review_token && options_.tls_ca.empty() && !options_.insecure &&
        !is_loopback_listen(options_.listen))
      throw usage_error("refusing to listen on " + options_.listen +
                        " without authentication: give --token-file (or a role token file) or "
                        "--tls-ca, or --insecure");
    const Backend::PolicyListener push = [this](const mcp::v1::Policy& p) { return push_policy(p); };
    if (!options_.otlp.endpoint.empty()) otlp_ = std::make_unique<otlp::Exporter>(options_.otlp);
    backend_ = options_.nats.servers.empty() ? make_embedded_backend(options_, push)
                                             : make_jetstream_backend(options_, push);
    start_server();
  }

  ~Impl() override { shutdown(std::chrono::milliseconds(0)); }

  int port() const { return port_; }

  void shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      // Each subscription drains what is queued and ends; under mu_, so none is deleted meanwhile.
      for (auto* s : subscriptions_) s->queue().close();
    }
    backend_->stop();
    if (listener_) listener_->stop();  // no connection handed to a server that is stopping
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
    if (otlp_) {
      otlp_->shutdown(grace);
      const auto s = otlp_->stats();
      spdlog::info("OTLP export to {}: {} events exported, {} failed, {} dropped, {} retries",
                   options_.otlp.endpoint, s.exported, s.failed, s.dropped, s.retries);
    }
  }

  std::optional<otlp::ExporterStats> otlp_stats() const {
    if (!otlp_) return std::nullopt;
    return otlp_->stats();
  }

  ListenerHealth health() const { return listener_ ? listener_->health() : descriptor_health(); }

  // --- RPCs -------------------------------------------------------------------------------

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Publish(grpc::CallbackServerContext* ctx) override {
    auto stream = std::make_shared<PublishStream>(this, ctx);
    stream->start();
    return stream.get();
  }

  grpc::ServerWriteReactor<mcp::v1::SamplePacket>* Subscribe(grpc::CallbackServerContext* ctx,
                                                            const mcp::v1::SubscriptionRequest* req) override {
    if (Status st = check_auth(ctx, kSubscribe); !st.ok()) return new RefusedSubscription(st);
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

  Status ApplyPolicy(ServerContext* ctx, const mcp::v1::Policy* req,
                     mcp::v1::ApplyPolicyReply* reply) override {
    if (Status st = check_auth(ctx, kPolicy); !st.ok()) return st;
    try {
      uint32_t pushed = 0;
      *reply->mutable_stored() = backend_->apply_policy(*req, &pushed);
      reply->set_pushed_to_agents(pushed);
      spdlog::info("policy service='{}' probe='{}' rate={} qps={} stored, pushed to {} agents here",
                   req->service(), req->probe(), req->sampling_rate(), req->target_qps(), pushed);
      return Status::OK;
    } catch (const Error& e) {
      return Status(e.code() == ExitCode::kUsage ? StatusCode::INVALID_ARGUMENT
                                                 : StatusCode::UNAVAILABLE,
                    e.what());
    }
  }

  Backend& backend() { return *backend_; }

  Status ListPolicies(ServerContext* ctx, const mcp::v1::ListPoliciesRequest*,
                      mcp::v1::PolicyList* reply) override {
    if (Status st = check_auth(ctx, 0); !st.ok()) return st;
    for (const auto& p : backend_->policies()) *reply->add_policies() = p;
    return Status::OK;
  }

  Status Stats(ServerContext* ctx, const mcp::v1::StatsRequest*,
               mcp::v1::StatsReply* reply) override {
    if (Status st = check_auth(ctx, 0); !st.ok()) return st;
    fill_stats(reply);
    return Status::OK;
  }

  // The Stats reply without the access check: for the RPC above and for /metrics.
  void fill_stats(mcp::v1::StatsReply* reply) {
    std::lock_guard lock(mu_);
    uint64_t dropped = subscriber_dropped_;
    for (auto* s : subscriptions_) dropped += s->queue().total_dropped().packets;
    for (const auto& [key, count] : probe_counts_) {
      auto* p = reply->add_probes();
      p->set_service(key.first);
      p->set_probe(key.second);
      p->set_events(count.events);
      p->set_adjusted_count(count.adjusted);
      p->set_seen(count.seen);
      p->set_corrected_count(count.corrected);
      p->set_error_adjusted_count(count.errors);
    }
    reply->set_probe_series_overflow(probe_overflow_);
    reply->set_batches(batches_);
    reply->set_duplicate_batches(duplicates_);
    reply->set_agents_connected(static_cast<uint32_t>(agents_.size()));
    reply->set_subscribers(static_cast<uint32_t>(subscriptions_.size()));
    reply->set_subscriber_dropped_packets(dropped);
    reply->set_refused_publishes(refused_.load(std::memory_order_relaxed));
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
      if (!options_.tls_ca.empty()) ssl.pem_root_certs = read_text_file(options_.tls_ca, "TLS CA");
      ssl.pem_key_cert_pairs.push_back({read_text_file(options_.tls_key, "TLS key"),
                                        read_text_file(options_.tls_cert, "TLS certificate")});
      creds = grpc::SslServerCredentials(ssl);
    } else if (!options_.tls_ca.empty()) {
      throw usage_error("--tls-ca on the broker needs --tls-cert and --tls-key");
    } else {
      creds = grpc::InsecureServerCredentials();
    }
    const std::optional<gid_t> group = socket_group(options_);
    grpc::ServerBuilder builder;
    // gRPC's default handshake deadline is 120 s and idle connections are kept forever.
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, static_cast<int>(options_.handshake_timeout.count()));
    if (options_.connection_idle.count() > 0)
      builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(options_.connection_idle.count()));
    if (options_.listen.starts_with("unix:")) {
      builder.AddListeningPort(options_.listen, creds, &port_);
    } else {
      // gRPC never calls accept() on TCP: its listener stops for good after one EMFILE.
      listener_ = std::make_unique<Listener>(options_.listen);
      port_ = listener_->port();
      acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
    }
    builder.RegisterService(this);
    builder.SetMaxReceiveMessageSize(static_cast<int>(options_.limits.max_message_bytes));
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) throw runtime_error("cannot listen on " + options_.listen);
    if (options_.listen.starts_with("unix:")) restrict_socket(options_.listen, group);
    if (listener_)
      listener_->start([this](int listen_fd, int fd) {
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
        p.listener_fd = listen_fd;
        p.fd = fd;
        acceptor_->HandleNewConnection(&p);
      });
  }

  // Resolved before listening, so an unknown group fails with nothing started.
  static std::optional<gid_t> socket_group(const BrokerOptions& o) {
    if (o.socket_group.empty()) return std::nullopt;
    if (!o.listen.starts_with("unix:"))
      throw usage_error("--socket-group needs a unix:PATH --listen, not " + o.listen);
    const struct group* g = ::getgrnam(o.socket_group.c_str());
    if (g == nullptr) throw usage_error("--socket-group: no group named '" + o.socket_group + "'");
    return g->gr_gid;
  }

  // Who may connect to a unix socket is who may write it: 0600 (the broker's user and root),
  // or 0660 with the group.
  static void restrict_socket(const std::string& listen, std::optional<gid_t> group) {
    std::string path = listen.substr(std::string_view("unix:").size());
    if (path.starts_with("//")) path.erase(0, 2);  // unix:///abs/path
    if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
      throw runtime_error("cannot give " + path + " to group " + std::to_string(*group) + ": " + std::strerror(errno));
    if (::chmod(path.c_str(), group ? 0660 : 0600) != 0)
      throw runtime_error("cannot restrict " + path + ": " + std::strerror(errno));
  }

  // `role` 0: any valid credential. *identity: what a Publish binds its agent id to (access.h).
  Status check_auth(const grpc::ServerContextBase* ctx, uint8_t role, std::string* identity = nullptr) const {
    std::string_view header;
    const auto& md = ctx->client_metadata();
    if (const auto it = md.find("authorization"); it != md.end())
      header = std::string_view(it->second.data(), it->second.size());
    const std::string_view bearer =
        header.starts_with("Bearer ") ? header.substr(std::string_view("Bearer ").size()) : std::string_view();
    if (!options_.tokens.empty() || options_.review_token) {
      uint8_t roles = options_.tokens.empty() ? 0 : roles_for_header(options_.tokens, header);
      std::optional<std::string> node;
      if (roles == 0 && options_.review_token && (node = options_.review_token(bearer))) roles = kPublish;
      if (roles == 0) return Status(StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
      if (role != 0 && (roles & role) == 0)
        return Status(StatusCode::PERMISSION_DENIED,
                      "this token has the roles '" + role_names(roles) + "', not '" + role_names(role) + "'");
      if (node && identity != nullptr) {
        *identity = std::string(kNodeIdentityPrefix) + *node;  // publish_stream holds the agent id to it
        return Status::OK;
      }
    }
    if (identity == nullptr) return Status::OK;
    const auto auth = ctx->auth_context();
    if (auth && auth->IsPeerAuthenticated()) {
      *identity = "x509:";
      for (const auto& id : auth->GetPeerIdentity()) *identity += std::string(id.data(), id.size());
    } else if (!options_.tokens.empty()) {
      *identity = token_identity(bearer);
    }
    return Status::OK;
  }

  static constexpr std::string_view kNodeIdentityPrefix = "node:";

  // Every message after the first: a hello may only repeat the stream's agent id and
  // incarnation; a batch must pass check_batch().

  Status check_message(const std::string& agent_id, uint64_t incarnation,
                       const mcp::v1::AgentMessage& msg) const {
    if (msg.has_hello() && !msg.hello().agent_id().empty() && msg.hello().agent_id() != agent_id)
      return Status(StatusCode::INVALID_ARGUMENT, "a Publish stream carries one agent id");
    if (msg.has_hello() && msg.hello().incarnation() != incarnation)
      return Status(StatusCode::INVALID_ARGUMENT, "a Publish stream carries one incarnation");
    if (msg.has_hello()) return to_status(check_hello(msg.hello()));
    if (msg.has_batch()) return to_status(check_batch(msg.batch(), options_.limits));
    if (msg.has_policy_status()) return check_policy_status(msg.policy_status());
    return Status::OK;
  }

  static Status check_policy_status(const mcp::v1::PolicyStatus& s) {
    if (s.refusals_size() > 256) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: at most 256 refusals");
    for (const auto& r : s.refusals()) {
      if (r.refused_by_size() > 16) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: at most 16 probes per refusal");
      bool long_string = r.service().size() > 1024 || r.probe().size() > 1024 || r.trace_id_prefix().size() > 1024 ||
                         r.reason().size() > 1024;
      for (const auto& p : r.refused_by()) long_string |= p.size() > 1024;
      if (long_string) return Status(StatusCode::INVALID_ARGUMENT, "policy_status: strings of at most 1024 bytes");
    }
    return Status::OK;
  }

  // check_message(), then prepare() for a batch: what both publish loops do with each message.
  Status take_message(const PublishStream* conn, const std::string& agent_id, uint64_t incarnation,
                      mcp::v1::AgentMessage& msg, PreparedBatch* prepared) {
    Status status = check_message(agent_id, incarnation, msg);
    if (status.ok() && msg.has_batch())
      status = backend_->check_sequence(agent_id, incarnation, msg.batch().sequence());
    if (status.ok() && msg.has_batch()) status = prepare(agent_id, incarnation, msg.mutable_batch(), prepared);
    if (status.ok() && msg.has_policy_status()) {
      std::lock_guard lock(mu_);
      auto& r = refusals_[conn];
      r.agent_id = agent_id;
      r.status = msg.policy_status();
    }
    return status;
  }

 public:
  // Every connected agent's refusals, by policy key: "AGENT: PROBE[, PROBE] (REASON)".
  std::map<PolicyKey, std::vector<std::string>> policy_refusals() const {
    std::lock_guard lock(mu_);
    std::map<PolicyKey, std::vector<std::string>> out;
    for (const auto& [conn, r] : refusals_)
      for (const auto& f : r.status.refusals()) {
        std::string line = r.agent_id + ":";
        for (int i = 0; i < f.refused_by_size(); i++) line += (i ? ", " : " ") + f.refused_by(i);
        if (!f.reason().empty()) line += " (" + f.reason() + ")";
        out[{f.service(), f.probe(), f.trace_id_prefix()}].push_back(std::move(line));
      }
    for (auto& [key, lines] : out) std::sort(lines.begin(), lines.end());
    return out;
  }

 private:

  // The broker's hybrid logical clock (packed, as the agents'): it merges every
  // batch's newest event stamp, so what it sends back (acks, pushes, packets)
  // is ordered after what it received, whatever the nodes' wall clocks say.
  uint64_t hlc_now() { return hlc_.now(unix_ns()); }

  // Parses and checks Batch.events once (parse_event_block), sets every event id (in the parsed
  // block and, by with_event_ids, in its bytes: not re-encoded), merges the batch's newest HLC.
  // Swaps the batch's contents out.
  Status prepare(const std::string& agent_id, uint64_t incarnation, mcp::v1::Batch* batch,
                 PreparedBatch* out) {
    const uint64_t seq = batch->sequence();
    auto packet = std::make_shared<mcp::v1::SamplePacket>();
    packet->set_agent_id(agent_id);
    packet->set_sequence(seq);
    packet->set_incarnation(incarnation);
    packet->mutable_counts()->Swap(batch->mutable_counts());
    uint64_t newest = 0;
    uint32_t index = 0;
    const BatchEventIds id_of(agent_id, seq, incarnation);
    if (!batch->events().empty()) {
      auto block = make_arena_block(batch->events().size());
      if (const Verdict v = parse_event_block(batch->events(), options_.limits, block.get()); !v.ok())
        return to_status(v);
      std::vector<uint64_t> ids(static_cast<size_t>(block->events_size()));  // 0: the agent's own
      for (auto& e : *block->mutable_events()) {
        if (e.event_id() == 0) e.set_event_id(ids[index] = id_of(index));
        ++index;
        newest = std::max<uint64_t>(newest, e.hlc());
      }
      // The bytes as received plus the ids (shared from here on); encoded afresh only if the
      // copy is refused, which a block that parsed should never be.
      if (!with_event_ids(batch->events(), ids, packet->mutable_events()))
        block->SerializeToString(packet->mutable_events());
      out->block = std::move(block);
    } else {
      packet->mutable_samples()->Swap(batch->mutable_samples());
      for (auto& s : *packet->mutable_samples()) {
        s.set_agent_id(agent_id);  // a sample cannot claim another agent
        if (s.event_id() == 0) s.set_event_id(id_of(index));
        ++index;
        newest = std::max<uint64_t>(newest, s.hlc());
      }
    }
    if (newest) hlc_.merge(newest, unix_ns());
    out->packet = std::move(packet);
    return Status::OK;
  }

  // A malformed batch from an agent that takes refused acks: counted, logged, acked as refused.
  void refuse_batch(const std::string& agent_id, uint64_t sequence, const Status& why, mcp::v1::Ack* ack) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("agent {}: batch {} refused: {}", agent_id, sequence, why.error_message());
    ack->set_sequence(sequence);
    ack->set_refused(true);
    ack->set_reason(why.error_message());
  }

  // Hands a newly stored batch to the OTLP exporter (never blocks: it queues or drops). A v1
  // batch is converted to a block first, only when OTLP is on.
  void export_otlp(const PreparedBatch& batch, const otlp::Origin& origin) {
    if (!otlp_) return;
    std::shared_ptr<const mcp::v1::EventBlock> block = batch.block;
    if (!block && batch.packet->samples_size() > 0) {
      auto converted = std::make_shared<mcp::v1::EventBlock>();
      samples_to_block(batch.packet->samples(), converted.get());
      block = std::move(converted);
    }
    otlp_->offer(std::move(block), origin);
  }

  // One agent's Publish stream on the callback API, one path for every backend. Each batch is
  // checked and prepared as it is read, then stored: inline by the embedded backend, or
  // pipelined (JetStream: store_async), so an agent's in-flight window overlaps the
  // replication round trips. Acks go back in sequence order as batches are stored. Reading
  // pauses while more than limits.max_stream_bytes_in_flight of wire bytes wait to be stored or
  // while kMaxQueuedReplies replies wait to be written (HTTP/2 flow control then holds the agent
  // back). A refused message ends the stream with its status once the acks before it are
  // written; a batch the store will not take ends it at once (the agent replays from its last
  // ack). Replies and policy pushes share one write queue, one write in flight. Owned by itself
  // from start() to OnDone, and by whoever still holds it (a store callback, a policy push):
  // those only touch gRPC while the stream is not finished.
  class PublishStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                              public std::enable_shared_from_this<PublishStream> {
   public:
    PublishStream(Impl* broker, grpc::CallbackServerContext* ctx) : broker_(broker), ctx_(ctx) {}

    void start() {
      self_ = shared_from_this();
      std::lock_guard lock(mu_);
      if (Status st = broker_->check_auth(ctx_, kPublish, &credential_); !st.ok()) {
        end_locked(st);
        return;
      }
      read_more_locked();
    }

    // Queues a message for the agent; false once the stream is over.
    bool send(const mcp::v1::BrokerMessage& msg) {
      std::lock_guard lock(mu_);
      if (finished_ || end_) return false;
      out_.push_back(to_buffer(msg));
      write_next_locked();
      return true;
    }

    // read_pending_ stays set until the message is dealt with: only then may another read start
    // (from here or from a completed store), so batches are stored in the order they came.
    void OnReadDone(bool ok) override {
      if (!ok) {
        std::lock_guard lock(mu_);
        read_pending_ = false;
        reading_ = false;
        if (agent_id_.empty() && !end_)
          end_locked(Status(StatusCode::INVALID_ARGUMENT, "Publish stream ended before a hello or a batch"));
        maybe_finish_locked();
        return;
      }
      take(in_);
      std::lock_guard lock(mu_);
      read_pending_ = false;
      read_more_locked();
    }

    void OnWriteDone(bool ok) override {
      std::lock_guard lock(mu_);
      write_pending_ = false;
      if (!ok) {
        broken_ = true;  // the agent is gone
      } else {
        write_next_locked();
        read_more_locked();
      }
      maybe_finish_locked();
    }

    void OnCancel() override {
      std::lock_guard lock(mu_);
      broken_ = true;
      maybe_finish_locked();
    }

    void OnDone() override {
      broker_->leave(this);
      if (final_.ok())
        spdlog::info("agent {} disconnected", agent_id_.empty() ? "(none)" : agent_id_);
      else
        spdlog::warn("agent {} from {} refused: {}", agent_id_.empty() ? "(none)" : agent_id_, ctx_->peer(),
                     final_.error_message());
      const auto last = std::move(self_);  // may be the last reference: nothing after this
    }

   private:
    static constexpr size_t kMaxQueuedReplies = 256;

    struct Entry {
      uint64_t sequence = 0;
      size_t bytes = 0;
      bool done = false;
      bool duplicate = false;
      std::string refused;  // why the batch was refused (Ack.refused)
    };

    void take(grpc::ByteBuffer& buffer) {
      mcp::v1::AgentMessage msg;
      size_t wire_bytes = 0;
      Status status = decode_agent_message(buffer, broker_->options_.limits, &msg, &wire_bytes);
      if (status.ok() && agent_id_.empty()) status = join(msg);
      PreparedBatch prepared;
      if (status.ok()) status = broker_->take_message(this, agent_id_, incarnation_, msg, &prepared);
      if (!status.ok() && refused_acks_ && msg.has_batch()) {
        // Acked as refused in order with the batches around it; the stream goes on.
        mcp::v1::Ack ack;
        broker_->refuse_batch(agent_id_, msg.batch().sequence(), status, &ack);
        auto entry = std::make_shared<Entry>();
        entry->sequence = ack.sequence();
        entry->refused = ack.reason();
        entry->done = true;
        std::lock_guard lock(mu_);
        entries_.push_back(std::move(entry));
        release_acks_locked();
        return;
      }
      if (!status.ok()) {
        std::lock_guard lock(mu_);
        end_locked(status);
        return;
      }
      if (!msg.has_batch()) return;
      auto entry = std::make_shared<Entry>();
      entry->sequence = msg.batch().sequence();
      entry->bytes = wire_bytes;
      {
        std::lock_guard lock(mu_);
        entries_.push_back(entry);
        window_bytes_ += wire_bytes;
      }
      // Not under mu_: a store may complete on this thread.
      broker_->store(agent_id_, credential_, origin_, prepared,
                     [self = shared_from_this(), entry](bool duplicate, const Status& st) {
                       self->stored(*entry, duplicate, st);
                     });
    }

    // The first message names the agent: checked, admitted, joined to the broker's agents
    // (policy pushes), and sent the full policy set before anything else.
    Status join(const mcp::v1::AgentMessage& msg) {
      if (msg.has_hello()) {
        agent_id_ = msg.hello().agent_id();
        origin_.host_name = msg.hello().hostname();
        incarnation_ = msg.hello().incarnation();
        for (const auto& c : msg.hello().capabilities()) refused_acks_ |= c == kCapabilityRefusedAcks;
      }
      if (agent_id_.empty()) {
        const auto it = ctx_->client_metadata().find("x-mcp-agent-id");
        if (it != ctx_->client_metadata().end()) agent_id_.assign(it->second.data(), it->second.size());
      }
      if (const Verdict v = check_agent_id(agent_id_); !v.ok()) {
        agent_id_.clear();
        return to_status(v);
      }
      if (credential_.starts_with(kNodeIdentityPrefix)) {
        const std::string node = credential_.substr(kNodeIdentityPrefix.size());
        if (agent_id_ != node)
          return Status(StatusCode::PERMISSION_DENIED,
                        "the credential of node '" + node + "' may publish only as agent id '" + node + "'");
      }
      if (Status admitted = broker_->backend_->admit(agent_id_, credential_); !admitted.ok()) return admitted;
      origin_.agent_id = agent_id_;
      // The full set goes first: a push for this agent waits on mu_, and the set is read after
      // the agent joined, so a policy stored meanwhile is in the set, pushed after it, or both
      // (pushes are idempotent); never lost behind a set that lacks it.
      std::lock_guard lock(mu_);
      if (!broker_->join(shared_from_this())) return Status(StatusCode::UNAVAILABLE, "broker stopping");
      mcp::v1::BrokerMessage push;
      push.mutable_policies()->set_full_set(true);
      push.mutable_policies()->set_accepts_policy_status(true);
      for (const auto& p : broker_->backend_->policies()) *push.mutable_policies()->add_policies() = p;
      push.set_broker_hlc(broker_->hlc_now());
      out_.push_back(to_buffer(push));
      write_next_locked();
      spdlog::info("agent {} connected from {}", agent_id_, ctx_->peer());
      return Status::OK;
    }

    void stored(Entry& entry, bool duplicate, const Status& status) {
      std::lock_guard lock(mu_);
      entry.done = true;
      entry.duplicate = duplicate;
      if (!status.ok()) {
        store_failed_ = true;
        end_locked(status);
      }
      release_acks_locked();
      read_more_locked();
    }

    // Acks for the stored batches at the head of the window, in order.
    void release_acks_locked() {
      while (!store_failed_ && !entries_.empty() && entries_.front()->done) {
        const Entry& e = *entries_.front();
        mcp::v1::BrokerMessage reply;
        reply.set_broker_hlc(broker_->hlc_now());
        reply.mutable_ack()->set_sequence(e.sequence);
        reply.mutable_ack()->set_duplicate(e.duplicate);
        if (!e.refused.empty()) {
          reply.mutable_ack()->set_refused(true);
          reply.mutable_ack()->set_reason(e.refused);
        }
        out_.push_back(to_buffer(reply));
        window_bytes_ -= e.bytes;
        entries_.pop_front();
      }
      write_next_locked();
      maybe_finish_locked();
    }

    void write_next_locked() {
      if (write_pending_ || out_.empty() || finished_ || broken_) return;
      writing_ = std::move(out_.front());
      out_.pop_front();
      write_pending_ = true;
      StartWrite(&writing_);
    }

    void read_more_locked() {
      if (read_pending_ || !reading_ || end_ || finished_ || broken_) return;
      if (window_bytes_ > broker_->options_.limits.max_stream_bytes_in_flight) return;
      if (out_.size() >= kMaxQueuedReplies) return;
      read_pending_ = true;
      StartRead(&in_);
    }

    void end_locked(Status status) {
      if (!end_) end_ = std::move(status);
      maybe_finish_locked();
    }

    // Finishes once nothing is left to do: at once (no write in flight) when the agent is gone
    // or the store failed; after the last ack otherwise.
    void maybe_finish_locked() {
      if (finished_ || write_pending_) return;
      const bool abrupt = broken_ || store_failed_;
      if (!abrupt) {
        if (!end_ && reading_) return;
        if (!entries_.empty() || !out_.empty()) return;
      }
      finished_ = true;
      final_ = end_ ? *end_ : Status::OK;
      if (is_refusal(final_)) broker_->refused_.fetch_add(1, std::memory_order_relaxed);
      Finish(final_);
    }

    Impl* const broker_;
    grpc::CallbackServerContext* const ctx_;
    std::shared_ptr<PublishStream> self_;  // from start() to OnDone
    // Only the reading side (one read at a time) touches these, once joined read-only.
    std::string credential_;
    std::string agent_id_;
    uint64_t incarnation_ = 0;  // fixed by the first hello: sequences count within it
    bool refused_acks_ = false;  // a malformed batch is acked as refused, the stream goes on
    otlp::Origin origin_;
    grpc::ByteBuffer in_;

    std::mutex mu_;  // guards everything below
    std::deque<std::shared_ptr<Entry>> entries_;  // batches read, acked in this order
    uint64_t window_bytes_ = 0;                   // wire bytes of entries not yet acked
    std::deque<grpc::ByteBuffer> out_;            // replies and pushes waiting to be written
    grpc::ByteBuffer writing_;
    bool write_pending_ = false;
    bool read_pending_ = false;
    bool reading_ = true;        // the agent has not closed its side
    bool broken_ = false;        // cancelled, or a write failed
    bool store_failed_ = false;
    std::optional<Status> end_;  // the stream ends with this
    bool finished_ = false;
    Status final_;
  };

  // Stores a prepared batch, counting it in Stats once stored (the embedded backend: before its
  // subscribers can see it, so Stats never lags them) and handing a new one to OTLP; `done` runs
  // once (inline for the embedded backend, on a backend thread when pipelined) with whether it
  // was a duplicate, or the status that ends the stream.
  using Stored = std::function<void(bool duplicate, const Status& status)>;
  void store(const std::string& agent_id, const std::string& credential, const otlp::Origin& origin,
             PreparedBatch& prepared, Stored done) {
    prepared.packet->set_broker_hlc(hlc_now());
    ProbeTotals counts;
    count_events(*prepared.packet, prepared.block.get(), counts);
    const auto settle = [this, exported = prepared, origin](bool duplicate) {  // the shared packet and block
      if (duplicate) {
        std::lock_guard lock(mu_);
        ++duplicates_;
      } else {
        export_otlp(exported, origin);
      }
    };
    if (!backend_->pipelined()) {
      bool duplicate = false;
      Status st;
      try {
        st = backend_->store(agent_id, credential, prepared, &duplicate, [&] { count_stored(counts); });
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
      if (!duplicate) count_stored(counts);
      settle(duplicate);
      done(duplicate, Status::OK);
    });
  }

  void count_stored(const ProbeTotals& counts) {
    std::lock_guard lock(mu_);
    ++batches_;
    add_totals(counts, probe_counts_, options_.max_probe_series, &probe_overflow_);
  }

  // An agent's stream joins the ones policies are pushed to; false when the broker is stopping.
  bool join(std::shared_ptr<PublishStream> stream) {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    agents_.insert(std::move(stream));
    return true;
  }

  void leave(PublishStream* stream) {
    std::lock_guard lock(mu_);
    refusals_.erase(stream);
    for (auto it = agents_.begin(); it != agents_.end(); ++it)
      if (it->get() == stream) {
        agents_.erase(it);
        break;
      }
  }

  // Called by the backend for every stored policy (JetStream: every change in the bucket, from
  // any broker).
  uint32_t push_policy(const mcp::v1::Policy& policy) {
    std::vector<std::shared_ptr<PublishStream>> agents;
    {
      std::lock_guard lock(mu_);
      agents.assign(agents_.begin(), agents_.end());
    }
    mcp::v1::BrokerMessage push;
    *push.mutable_policies()->add_policies() = policy;
    push.set_broker_hlc(hlc_now());
    uint32_t pushed = 0;
    for (auto& a : agents) pushed += a->send(push) ? 1 : 0;
    return pushed;
  }

  BrokerOptions options_;
  std::unique_ptr<Listener> listener_;  // TCP; null on a unix socket (gRPC's own listener)
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;  // listener_'s connections into server_
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  clock::Hlc hlc_;

  mutable std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  std::set<std::shared_ptr<PublishStream>> agents_;
  std::set<SubscriptionStream*> subscriptions_;
  uint64_t subscriber_dropped_ = 0;  // by subscriptions that ended
  struct AgentRefusals {
    std::string agent_id;
    mcp::v1::PolicyStatus status;
  };
  std::map<const PublishStream*, AgentRefusals> refusals_;  // the latest policy_status per stream
  ProbeTotals probe_counts_;
  uint64_t probe_overflow_ = 0;  // events counted under kOtherProbes
  uint64_t batches_ = 0;
  uint64_t duplicates_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::unique_ptr<otlp::Exporter> otlp_;  // null: OTLP export off
  WakeTimer wake_timer_;  // lingering subscriptions' wake-ups
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
bool Broker::remove_policy(const PolicyKey& key) {
  return impl_->backend().remove_policy(key);
}
std::vector<mcp::v1::Policy> Broker::policies() const { return impl_->backend().policies(); }
std::map<PolicyKey, std::vector<std::string>> Broker::policy_refusals() const { return impl_->policy_refusals(); }

}  // namespace mcp::broker
