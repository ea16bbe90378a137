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
#include "clock/hlc.h"
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

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Publish is served over raw bytes (see the constructor) so a message is bounded before it is
// parsed; replies are serialised here.
using RawStream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

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

// Reads the next AgentMessage: bounded on the wire first (scan_agent_message), parsed after.
// False at the end of the stream; *status set when the message is refused.
bool read_agent_message(RawStream* stream, const PublishLimits& limits, mcp::v1::AgentMessage* msg,
                        Status* status, size_t* wire_bytes) {
  grpc::ByteBuffer buffer;
  if (!stream->Read(&buffer)) return false;
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) {
    *status = Status(StatusCode::INVALID_ARGUMENT, "unreadable message");
    return true;
  }
  std::string wire;
  wire.reserve(buffer.Length());
  for (const auto& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  buffer.Clear();
  *wire_bytes = wire.size();
  if (const Verdict v = scan_agent_message(wire, limits); !v.ok()) {
    *status = to_status(v);
    return true;
  }
  if (!msg->ParseFromString(wire)) {
    *status = Status(StatusCode::INVALID_ARGUMENT,
                     "not a valid AgentMessage (a string field that is not UTF-8?)");
    return true;
  }
  if (!msg->has_hello() && !msg->has_batch() && !msg->has_policy_status())
    *status = Status(StatusCode::INVALID_ARGUMENT, "AgentMessage with neither hello, batch nor policy_status");
  return true;
}

struct AgentConn {
  std::mutex write_mu;
  RawStream* stream;
  bool write(const mcp::v1::BrokerMessage& msg) {
    std::lock_guard lock(write_mu);
    return write_locked(msg);
  }
  bool write_locked(const mcp::v1::BrokerMessage& msg) {
    grpc::Slice slice(msg.SerializeAsString());
    grpc::ByteBuffer buffer(&slice, 1);
    return stream != nullptr && stream->Write(buffer);
  }
  // The Publish handler calls this before returning: a policy push racing with it must not
  // write to a finished stream.
  void detach() {
    std::lock_guard lock(write_mu);
    stream = nullptr;
  }
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

class Broker::Impl final : public mcp::v1::Sampling::Service {
 public:
  explicit Impl(BrokerOptions options)
      : options_(std::move(options)) {
    if (options_.tokens.empty() && !options_.review_token && options_.tls_ca.empty() && !options_.insecure &&
        !is_loopback_listen(options_.listen))
      throw usage_error("refusing to listen on " + options_.listen +
                        " without authentication: give --token-file (or a role token file) or "
                        "--tls-ca, or --insecure");
    // Publish over raw bytes: scan_agent_message() bounds a message before protobuf parses it.
    MarkMethodStreamed(0, new grpc::internal::BidiStreamingHandler<Impl, grpc::ByteBuffer, grpc::ByteBuffer>(
                              [](Impl* self, ServerContext* ctx, RawStream* stream) {
                                return self->publish(ctx, stream);
                              },
                              this));
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
    }
    backend_->stop();
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

  // --- RPCs -------------------------------------------------------------------------------

  // Every refused Publish (bad or hostile input, a capability this broker lacks) is counted.
  Status publish(ServerContext* ctx, RawStream* stream) {
    Status status = publish_stream(ctx, stream);
    switch (status.error_code()) {
      case StatusCode::INVALID_ARGUMENT:
      case StatusCode::RESOURCE_EXHAUSTED:
      case StatusCode::FAILED_PRECONDITION:
      case StatusCode::PERMISSION_DENIED:
      case StatusCode::UNAUTHENTICATED:
        refused_.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        break;
    }
    return status;
  }

  Status publish_stream(ServerContext* ctx, RawStream* stream) {
    std::string credential;
    if (Status st = check_auth(ctx, kPublish, &credential); !st.ok()) return st;
    const PublishLimits& limits = options_.limits;
    mcp::v1::AgentMessage msg;
    Status refused = Status::OK;
    size_t wire_bytes = 0;
    if (!read_agent_message(stream, limits, &msg, &refused, &wire_bytes))
      return Status(StatusCode::INVALID_ARGUMENT, "Publish stream ended before a hello or a batch");
    if (!refused.ok()) return refused;
    std::string agent_id;
    otlp::Origin origin;
    uint64_t incarnation = 0;  // fixed by the first hello: sequences count within it
    bool refused_acks = false;  // a malformed batch is acked as refused, the stream goes on
    if (msg.has_hello()) {
      agent_id = msg.hello().agent_id();
      origin.host_name = msg.hello().hostname();
      incarnation = msg.hello().incarnation();
      for (const auto& c : msg.hello().capabilities()) refused_acks |= c == kCapabilityRefusedAcks;
    }
    if (agent_id.empty()) {
      const auto it = ctx->client_metadata().find("x-mcp-agent-id");
      if (it != ctx->client_metadata().end()) agent_id.assign(it->second.data(), it->second.size());
    }
    if (const Verdict v = check_agent_id(agent_id); !v.ok()) return to_status(v);
    if (credential.starts_with(kNodeIdentityPrefix)) {
      const std::string node = credential.substr(kNodeIdentityPrefix.size());
      if (agent_id != node)
        return Status(StatusCode::PERMISSION_DENIED,
                      "the credential of node '" + node + "' may publish only as agent id '" + node + "'");
    }
    if (Status admitted = backend_->admit(agent_id, credential); !admitted.ok()) return admitted;
    origin.agent_id = agent_id;

    auto conn = std::make_shared<AgentConn>();
    conn->stream = stream;
    {
      // The full set goes first: a push for this agent waits on its write lock, and the set is
      // read after the agent joined, so a policy stored meanwhile is in the set, pushed after
      // it, or both (pushes are idempotent); never lost behind a set that lacks it.
      std::lock_guard first(conn->write_mu);
      {
        std::lock_guard lock(mu_);
        if (stopping_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
        agents_.insert(conn);
      }
      mcp::v1::BrokerMessage push;
      push.mutable_policies()->set_full_set(true);
      push.mutable_policies()->set_accepts_policy_status(true);
      for (const auto& p : backend_->policies()) *push.mutable_policies()->add_policies() = p;
      push.set_broker_hlc(hlc_now());
      conn->write_locked(push);
    }
    spdlog::info("agent {} connected from {}", agent_id, ctx->peer());
    Status status = Status::OK;
    if (backend_->pipelined()) {
      status = publish_pipelined(ctx, stream, conn, agent_id, incarnation, refused_acks, origin, &msg,
                                 wire_bytes);
    } else {
      mcp::v1::BrokerMessage reply;
      do {
        PreparedBatch prepared;
        status = take_message(conn.get(), agent_id, incarnation, msg, &prepared);
        reply.Clear();
        if (!status.ok()) {
          if (!refused_acks || !msg.has_batch()) break;
          refuse_batch(agent_id, msg.batch().sequence(), status, reply.mutable_ack());
          status = Status::OK;
        } else if (!msg.has_batch()) {
          continue;
        } else {
          bool duplicate = false;
          try {
            status = ingest(agent_id, credential, origin, prepared, &duplicate);
          } catch (const std::exception& e) {
            spdlog::error("ingest from {}: {}", agent_id, e.what());
            status = Status(StatusCode::INTERNAL, "broker could not store the batch");
          }
          if (!status.ok()) break;
          reply.mutable_ack()->set_sequence(msg.batch().sequence());
          reply.mutable_ack()->set_duplicate(duplicate);
        }
        reply.set_broker_hlc(hlc_now());
        if (!conn->write(reply)) break;
        msg.Clear();
      } while (read_agent_message(stream, limits, &msg, &status, &wire_bytes) && status.ok());
    }
    {
      std::lock_guard lock(mu_);
      agents_.erase(conn);
      refusals_.erase(conn.get());
    }
    conn->detach();
    if (status.ok())
      spdlog::info("agent {} disconnected", agent_id);
    else
      spdlog::warn("agent {} from {} refused: {}", agent_id, ctx->peer(), status.error_message());
    return status;
  }

  Status Subscribe(ServerContext* ctx, const mcp::v1::SubscriptionRequest* req,
                   grpc::ServerWriter<mcp::v1::SamplePacket>* writer) override {
    if (Status st = check_auth(ctx, kSubscribe); !st.ok()) return st;
    if (!(req->sampling_rate() >= 0 && req->sampling_rate() <= 1))  // NaN too
      return Status(StatusCode::INVALID_ARGUMENT, "sampling_rate must be in (0, 1]");
    return backend_->subscribe(ctx, *req, writer);
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
    // The backend's numbers first: it may hold its lock while taking mu_ (store's on_stored).
    const uint32_t subscribers = backend_->subscribers();
    const uint64_t dropped = backend_->subscriber_dropped_packets();
    std::lock_guard lock(mu_);
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
    reply->set_subscribers(subscribers);
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
    builder.AddListeningPort(options_.listen, creds, &port_);
    builder.RegisterService(this);
    builder.SetMaxReceiveMessageSize(static_cast<int>(options_.limits.max_message_bytes));
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) throw runtime_error("cannot listen on " + options_.listen);
    if (options_.listen.starts_with("unix:")) restrict_socket(options_.listen, group);
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
  Status check_auth(ServerContext* ctx, uint8_t role, std::string* identity = nullptr) const {
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
  Status take_message(const AgentConn* conn, const std::string& agent_id, uint64_t incarnation,
                      mcp::v1::AgentMessage& msg, PreparedBatch* prepared) {
    Status status = check_message(agent_id, incarnation, msg);
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

  // *duplicate for a replay (acked, not stored again); a refused batch is neither stored nor
  // counted.
  // A malformed batch from an agent that takes refused acks: counted, logged, acked as refused.
  void refuse_batch(const std::string& agent_id, uint64_t sequence, const Status& why, mcp::v1::Ack* ack) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("agent {}: batch {} refused: {}", agent_id, sequence, why.error_message());
    ack->set_sequence(sequence);
    ack->set_refused(true);
    ack->set_reason(why.error_message());
  }

  Status ingest(const std::string& agent_id, const std::string& credential, const otlp::Origin& origin,
                PreparedBatch& prepared, bool* duplicate) {
    prepared.packet->set_broker_hlc(hlc_now());
    const PreparedBatch exported = prepared;  // the shared packet and block, for OTLP
    const Status st = backend_->store(agent_id, credential, prepared, duplicate, [&] {
      ProbeTotals counts;
      count_events(*prepared.packet, prepared.block.get(), counts);
      std::lock_guard lock(mu_);
      ++batches_;
      add_totals(counts, probe_counts_, options_.max_probe_series, &probe_overflow_);  // counted once stored
    });
    if (st.ok() && *duplicate) {
      std::lock_guard lock(mu_);
      ++duplicates_;
    }
    if (st.ok() && !*duplicate) export_otlp(exported, origin);
    return st;
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

  // Pipelined (a backend that says so: JetStream): batches are stored as they arrive and acked
  // back in sequence order as the store confirms them, so the agent's in-flight window overlaps
  // the replication round trips. A batch the store will not take ends the stream; the agent
  // replays from its last ack. At most limits.max_stream_bytes_in_flight of wire bytes wait per
  // stream: past that the stream stops reading (HTTP/2 flow control then holds the agent back).
  Status publish_pipelined(ServerContext* ctx, RawStream* stream,
                           const std::shared_ptr<AgentConn>& conn, const std::string& agent_id,
                           uint64_t incarnation, bool refused_acks, const otlp::Origin& origin,
                           mcp::v1::AgentMessage* msg, size_t wire_bytes) {
    struct Entry {
      uint64_t sequence = 0;
      size_t bytes = 0;
      bool done = false;
      bool duplicate = false;
      std::string refused;  // why the batch was refused (Ack.refused)
    };
    struct Window {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<std::shared_ptr<Entry>> entries;
      uint64_t bytes = 0;
      std::string error;
      bool reading = true;
    };
    auto window = std::make_shared<Window>();
    std::thread acker([&, window] {
      mcp::v1::BrokerMessage reply;
      std::unique_lock lock(window->mu);
      for (;;) {
        window->cv.wait_for(lock, std::chrono::milliseconds(100), [&] {
          return !window->error.empty() || (!window->entries.empty() && window->entries.front()->done) ||
                 (!window->reading && window->entries.empty());
        });
        if (!window->error.empty()) break;
        if (!window->reading && (window->entries.empty() || ctx->IsCancelled())) break;
        std::vector<std::shared_ptr<Entry>> ready;
        while (!window->entries.empty() && window->entries.front()->done) {
          ready.push_back(window->entries.front());
          window->bytes -= window->entries.front()->bytes;
          window->entries.pop_front();
        }
        window->cv.notify_all();  // the reader may be waiting for room
        if (ready.empty()) continue;
        lock.unlock();
        bool written = true;
        for (const auto& e : ready) {
          reply.Clear();
          reply.set_broker_hlc(hlc_now());
          reply.mutable_ack()->set_sequence(e->sequence);
          reply.mutable_ack()->set_duplicate(e->duplicate);
          if (!e->refused.empty()) {
            reply.mutable_ack()->set_refused(true);
            reply.mutable_ack()->set_reason(e->refused);
          }
          if (!(written = conn->write(reply))) break;
        }
        lock.lock();
        if (!written) break;
      }
      const bool failed = !window->error.empty();
      lock.unlock();
      if (failed) ctx->TryCancel();  // ends the Read below; the agent replays what is unacked
    });

    const PublishLimits& limits = options_.limits;
    Status refused = Status::OK;
    do {
      auto entry = std::make_shared<Entry>();
      PreparedBatch prepared;
      refused = take_message(conn.get(), agent_id, incarnation, *msg, &prepared);
      if (!refused.ok() && refused_acks && msg->has_batch()) {
        // Acked in order with the batches around it, once those before it are.
        mcp::v1::Ack ack;
        refuse_batch(agent_id, msg->batch().sequence(), refused, &ack);
        refused = Status::OK;
        std::lock_guard lock(window->mu);
        entry->sequence = ack.sequence();
        entry->refused = ack.reason();
        entry->done = true;
        window->entries.push_back(entry);
        window->cv.notify_all();
        msg->Clear();
        continue;
      }
      if (!refused.ok()) break;
      if (!msg->has_batch()) continue;
      entry->sequence = msg->batch().sequence();
      entry->bytes = wire_bytes;
      prepared.packet->set_broker_hlc(hlc_now());
      ProbeTotals counts;
      count_events(*prepared.packet, prepared.block.get(), counts);
      {
        std::unique_lock lock(window->mu);
        window->cv.wait(lock, [&] {
          return !window->error.empty() || window->entries.empty() ||
                 window->bytes + entry->bytes <= limits.max_stream_bytes_in_flight;
        });
        if (!window->error.empty()) break;
        window->entries.push_back(entry);
        window->bytes += entry->bytes;
      }
      backend_->store_async(prepared, [this, window, entry, counts = std::move(counts),
                                       exported = prepared, origin](bool duplicate, const std::string& error) {
        if (error.empty() && !duplicate) export_otlp(exported, origin);
        if (error.empty()) {
          std::lock_guard lock(mu_);
          if (duplicate) {
            ++duplicates_;
          } else {
            ++batches_;
            add_totals(counts, probe_counts_, options_.max_probe_series, &probe_overflow_);
          }
        } else {
          spdlog::error("publish of batch {}: {}", entry->sequence, error);
        }
        std::lock_guard lock(window->mu);
        entry->done = true;
        entry->duplicate = duplicate;
        if (!error.empty() && window->error.empty()) window->error = error;
        window->cv.notify_all();
      });
      msg->Clear();
    } while (read_agent_message(stream, limits, msg, &refused, &wire_bytes) && refused.ok());
    {
      std::lock_guard lock(window->mu);
      window->reading = false;
      window->cv.notify_all();
    }
    acker.join();
    std::lock_guard lock(window->mu);
    if (!window->error.empty()) return Status(StatusCode::UNAVAILABLE, "store: " + window->error);
    return refused;
  }

  // Called by the backend for every stored policy (JetStream: every change in the bucket, from
  // any broker).
  uint32_t push_policy(const mcp::v1::Policy& policy) {
    std::vector<std::shared_ptr<AgentConn>> agents;
    {
      std::lock_guard lock(mu_);
      agents.assign(agents_.begin(), agents_.end());
    }
    mcp::v1::BrokerMessage push;
    *push.mutable_policies()->add_policies() = policy;
    push.set_broker_hlc(hlc_now());
    uint32_t pushed = 0;
    for (auto& a : agents) pushed += a->write(push) ? 1 : 0;
    return pushed;
  }

  BrokerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  clock::Hlc hlc_;

  mutable std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  std::set<std::shared_ptr<AgentConn>> agents_;
  struct AgentRefusals {
    std::string agent_id;
    mcp::v1::PolicyStatus status;
  };
  std::map<const AgentConn*, AgentRefusals> refusals_;  // the latest policy_status per stream
  ProbeTotals probe_counts_;
  uint64_t probe_overflow_ = 0;  // events counted under kOtherProbes
  uint64_t batches_ = 0;
  uint64_t duplicates_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::unique_ptr<otlp::Exporter> otlp_;  // null: OTLP export off
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
mcp::v1::Policy Broker::apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) {
  return impl_->backend().apply_policy(policy, pushed);
}
bool Broker::remove_policy(const PolicyKey& key) {
  return impl_->backend().remove_policy(key);
}
std::vector<mcp::v1::Policy> Broker::policies() const { return impl_->backend().policies(); }
std::map<PolicyKey, std::vector<std::string>> Broker::policy_refusals() const { return impl_->policy_refusals(); }

}  // namespace mcp::broker
