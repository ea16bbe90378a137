#include "broker/store/jetstream_client.h"

#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "broker/ingest/event_block.h"
#include "broker/store/nats_naming.h"
#include "broker/policy/policy_store.h"
#include "common/error.h"

namespace mcp::broker {
namespace {

using namespace std::chrono_literals;

std::string describe(natsStatus s, jsErrCode code = static_cast<jsErrCode>(0)) {
  std::string text = natsStatus_GetText(s);
  natsStatus last_status = NATS_OK;
  const char* last = nats_GetLastError(&last_status);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  if (code != 0) text += " [jetstream error " + std::to_string(static_cast<int>(code)) + "]";
  return text;
}

int64_t ms_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now())
      .count();
}

// Retries `attempt` (returning NATS_OK or an error text) until the deadline: a cluster that is
// still electing its leaders answers "no responders", timeouts or "insufficient resources".
template <typename F>
void retry_until(std::chrono::steady_clock::time_point deadline, const std::string& what,
                 F attempt) {
  std::string error;
  for (;;) {
    error = attempt();
    if (error.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    spdlog::debug("nats: {}: {}; retrying", what, error);
    std::this_thread::sleep_for(200ms);
  }
  throw runtime_error("nats backend: " + what + ": " + error);
}

class NatsFeed final : public JetStreamClient::Feed {
 public:
  explicit NatsFeed(natsSubscription* sub) : sub_(sub) {}
  ~NatsFeed() override {
    natsSubscription_Unsubscribe(sub_);
    natsSubscription_Destroy(sub_);
  }

  std::unique_ptr<mcp::v1::SamplePacket> next(std::chrono::milliseconds timeout) override {
    natsMsg* msg = nullptr;
    const natsStatus s = natsSubscription_NextMsg(&msg, sub_, std::max<int64_t>(1, timeout.count()));
    if (s == NATS_TIMEOUT) return nullptr;
    if (s != NATS_OK) {
      // The ordered consumer could not recreate itself (connection closed, consumer gone): the
      // caller ends the subscription and the consumer resubscribes from its last offset.
      throw runtime_error(std::string("nats backend: subscription ended: ") + natsStatus_GetText(s));
    }
    auto packet = std::make_unique<mcp::v1::SamplePacket>();
    jsMsgMetaData* meta = nullptr;
    const bool parsed = packet->ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
    if (parsed && natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
      packet->set_offset(meta->Sequence.Stream);
      jsMsgMetaData_Destroy(meta);
    } else {
      spdlog::warn("nats: unreadable message on {} skipped", natsMsg_GetSubject(msg));
      packet.reset();
    }
    natsMsg_Destroy(msg);
    return packet;
  }

 private:
  natsSubscription* sub_;
};

}  // namespace

class JetStreamClient::Impl {
  struct Part {
    std::string subject;
    std::string id;
    std::string data;
  };

  struct AsyncBatch {
    std::mutex mu;
    size_t remaining = 0;
    PublishOutcome outcome;
    std::string error;
    bool finished = false;
    std::chrono::steady_clock::time_point deadline;
    PublishDone done;

    void part_done(bool duplicate, const std::string& part_error) {
      std::string report;
      {
        std::lock_guard lock(mu);
        if (finished) return;
        outcome.duplicate = outcome.duplicate && duplicate;
        if (!part_error.empty()) {
          error = part_error;
          remaining = 0;
        } else {
          --remaining;
        }
        if (remaining > 0) return;
        finished = true;
        report = error;
      }
      done(outcome, report);
    }
    void finish(const std::string& e) {
      {
        std::lock_guard lock(mu);
        finished = true;
      }
      done(outcome, e);
    }
  };

  struct InFlight {
    std::shared_ptr<AsyncBatch> batch;
    std::string id;
    std::string error;  // why the last attempt failed, while it waits for a resend
  };

 public:
  Impl(NatsBackendOptions options, PolicyListener on_policy, std::shared_ptr<clock::ClockSource> clock)
      : options_(std::move(options)), on_policy_(std::move(on_policy)), clock_(clock::clock_or_system(std::move(clock))) {
    if (options_.servers.empty()) throw usage_error("nats backend: no server address");
    if (options_.replicas < 1 || options_.replicas > 5)
      throw usage_error("--stream-replicas must be between 1 and 5");
    if (options_.stream.empty() || options_.policy_bucket.empty() || options_.agent_bucket.empty())
      throw usage_error("nats backend: stream and buckets need names");
    try {
      connect();
      const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
      create_stream(deadline);
      kv_ = create_bucket(deadline, options_.policy_bucket, std::chrono::seconds(0));
      agents_kv_ = create_bucket(deadline, options_.agent_bucket, options_.agent_expiry);
      start_watcher(deadline);
      resender_ = std::thread([this] { resend_loop(); });
    } catch (...) {
      close();
      throw;
    }
  }

  ~Impl() { close(); }

  PublishOutcome publish(const mcp::v1::SamplePacket& packet, const mcp::v1::EventBlock* block) {
    const auto deadline = std::chrono::steady_clock::now() + options_.publish_timeout;
    PublishOutcome outcome;
    outcome.duplicate = true;
    for (const Part& part : split(packet, block)) {
      outcome.duplicate = publish_one(part.subject, part.id, part.data, deadline) && outcome.duplicate;
      ++outcome.messages;
    }
    if (outcome.messages == 0) outcome.duplicate = false;
    return outcome;
  }

  void publish_async(const mcp::v1::SamplePacket& packet, const mcp::v1::EventBlock* block,
                     PublishDone done) {
    std::vector<Part> parts = split(packet, block);
    auto batch = std::make_shared<AsyncBatch>();
    batch->remaining = parts.size();
    batch->outcome.messages = static_cast<uint32_t>(parts.size());
    batch->outcome.duplicate = !parts.empty();
    batch->deadline = std::chrono::steady_clock::now() + options_.publish_timeout;
    batch->done = std::move(done);
    if (parts.empty()) {
      batch->finish("");
      return;
    }
    for (Part& part : parts) {
      natsMsg* msg = nullptr;
      natsStatus s = natsMsg_Create(&msg, part.subject.c_str(), nullptr, part.data.data(),
                                    static_cast<int>(part.data.size()));
      if (s != NATS_OK) {
        batch->part_done(false, "message: " + describe(s));
        continue;
      }
      natsMsg* const key = msg;
      {
        std::lock_guard lock(async_mu_);
        in_flight_[key] = InFlight{batch, part.id};
      }
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = part.id.c_str();
      po.MaxWait = std::min<int64_t>(options_.publish_timeout.count(), 2000);
      s = js_PublishMsgAsync(js_, &msg, &po);
      if (s != NATS_OK) {
        {
          std::lock_guard lock(async_mu_);
          in_flight_.erase(key);
        }
        natsMsg_Destroy(msg);
        batch->part_done(false, "publish: " + describe(s));
      }
    }
  }

  std::unique_ptr<Feed> subscribe(const std::string& service, uint64_t resume_after) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = options_.stream.c_str();
    so.Ordered = true;
    // Short heartbeats: a consumer whose server died is noticed and recreated within ~3 s.
    so.Config.Heartbeat = std::chrono::nanoseconds(1s).count();
    so.Config.InactiveThreshold = std::chrono::nanoseconds(30s).count();
    so.Config.MemoryStorage = true;
    if (resume_after > 0) {
      so.Config.DeliverPolicy = js_DeliverByStartSequence;
      so.Config.OptStartSeq = resume_after + 1;
    } else {
      so.Config.DeliverPolicy = js_DeliverNew;
    }
    const std::string filter = subject_filter(service);
    natsSubscription* sub = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_SubscribeSync(&sub, js_, filter.c_str(), nullptr, &so, &code);
    if (s != NATS_OK) throw runtime_error("nats backend: subscribe " + filter + ": " + describe(s, code));
    // The broker's gRPC write is the back pressure; never let the client drop messages itself.
    natsSubscription_SetPendingLimits(sub, -1, -1);
    return std::make_unique<NatsFeed>(sub);
  }

  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) {
    mcp::v1::Policy stored;
    {
      std::lock_guard lock(mu_);
      stored = PolicyStore({}, clock_).apply(policy);  // validates and stamps (an empty store: no room to check)
      check_prefix_room(policies_, stored);  // the bucket's policies: the truth
    }
    const std::string data = stored.SerializeAsString();
    const std::string key = policy_key(key_of(stored));
    uint64_t revision = 0;
    const natsStatus s = kvStore_Put(&revision, kv_, key.c_str(), data.data(),
                                     static_cast<int>(data.size()));
    if (s != NATS_OK) throw runtime_error("nats backend: storing the policy: " + describe(s));
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return seen_revision_ >= revision; });
    const auto it = pushed_by_revision_.find(revision);
    if (pushed != nullptr) *pushed = it == pushed_by_revision_.end() ? 0 : it->second;
    return stored;
  }

  bool remove_policy(const PolicyKey& key) {
    {
      std::lock_guard lock(mu_);
      if (policies_.count(key) == 0) return false;
    }
    const natsStatus s = kvStore_Delete(kv_, policy_key(key).c_str());
    if (s != NATS_OK) throw runtime_error("nats backend: deleting the policy: " + describe(s));
    std::lock_guard lock(mu_);
    policies_.erase(key);  // listed without it at once; the watcher tells the agents
    return true;
  }

  std::vector<mcp::v1::Policy> policies() const {
    std::lock_guard lock(mu_);
    std::vector<mcp::v1::Policy> out;
    for (const auto& [key, p] : policies_) out.push_back(p);
    return out;
  }

 private:
  // Groups by service in order of first appearance: deterministic for a replayed batch, so
  // every part keeps its message id.
  std::vector<Part> split(const mcp::v1::SamplePacket& packet, const mcp::v1::EventBlock* block) const {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    std::map<std::string, size_t> index;
    const int n = block != nullptr ? block->events_size() : packet.samples_size();
    for (int i = 0; i < n; ++i) {
      const std::string& service = block != nullptr ? block_string(*block, block->events(i).service())
                                                    : packet.samples(i).service();
      auto [it, added] = index.emplace(service, groups.size());
      if (added) groups.push_back({service, {}});
      groups[it->second].second.push_back(i);
    }
    std::vector<Part> parts;
    mcp::v1::SamplePacket message;
    mcp::v1::EventBlock part_block;
    for (const auto& [service, members] : groups) {
      const std::string subject = subject_for(service);
      size_t begin = 0;
      size_t chunk = members.size();
      while (begin < members.size()) {
        const size_t end = std::min(members.size(), begin + chunk);
        message.Clear();
        message.set_agent_id(packet.agent_id());
        message.set_sequence(packet.sequence());
        message.set_incarnation(packet.incarnation());
        message.set_broker_hlc(packet.broker_hlc());
        if (block != nullptr) {
          if (begin == 0 && end == members.size() && groups.size() == 1) {
            message.set_events(packet.events());  // the whole batch: its block as encoded
          } else {
            part_block.Clear();
            *part_block.mutable_strings() = block->strings();
            *part_block.mutable_pair_sets() = block->pair_sets();
            for (size_t k = begin; k < end; ++k) *part_block.add_events() = block->events(members[k]);
            part_block.SerializeToString(message.mutable_events());
          }
        } else {
          for (size_t k = begin; k < end; ++k) *message.add_samples() = packet.samples(members[k]);
        }
        std::string data = message.SerializeAsString();
        if (data.size() > max_message_bytes_ && end - begin > 1) {
          // Halving keeps the split deterministic: the same batch always gives the same parts.
          chunk = std::max<size_t>(1, (end - begin) / 2);
          continue;
        }
        parts.push_back(Part{subject,
                             message_id(packet.agent_id(), packet.incarnation(), packet.sequence(),
                                        static_cast<uint32_t>(parts.size())),
                             std::move(data)});
        begin = end;
      }
    }
    return parts;
  }

  // JetStream's answer to one js_PublishMsgAsync, on the library's ack thread, which serves
  // every publish of the connection: nothing here waits or blocks (a resend may block while
  // MaxPending publishes are out), so a failure goes to the resend thread.
  static void on_async_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    if (pa != nullptr) {
      std::shared_ptr<AsyncBatch> batch;
      {
        std::lock_guard lock(self->async_mu_);
        const auto it = self->in_flight_.find(msg);
        if (it != self->in_flight_.end()) {
          batch = std::move(it->second.batch);
          self->in_flight_.erase(it);
        }
      }
      natsMsg_Destroy(msg);
      if (batch) batch->part_done(pa->Duplicate, "");  // stored: only now acknowledged
      return;
    }
    std::string error = pae != nullptr ? describe(pae->Err, pae->ErrCode) : "no ack";
    if (pae != nullptr && pae->ErrText != nullptr) error += std::string(": ") + pae->ErrText;
    // "No responders" comes back at once while a stream leader is elected: do not spin.
    const auto delay = pae == nullptr || pae->Err != NATS_TIMEOUT ? 50ms : 0ms;
    self->schedule_resend(msg, std::move(error), delay);
  }

  // A failed message waits `delay`, then the resend thread sends it again with the same id
  // (if the first attempt was stored after all, JetStream reports a duplicate) until the
  // batch's deadline; past it, or when stopping, it fails at once.
  void schedule_resend(natsMsg* msg, std::string error, std::chrono::milliseconds delay) {
    bool over = false;
    {
      std::lock_guard lock(async_mu_);
      const auto it = in_flight_.find(msg);
      if (it == in_flight_.end()) {
        natsMsg_Destroy(msg);
        return;
      }
      it->second.error = std::move(error);
      over = stop_ || ms_left(it->second.batch->deadline) <= 0;
    }
    if (!over) {
      std::lock_guard lock(resend_mu_);
      if (!resend_stopped_) {
        resends_.emplace(std::chrono::steady_clock::now() + delay, msg);
        resend_cv_.notify_one();
        return;
      }
    }
    fail(msg);
  }

  // The resend thread: sends each failed message again once its delay has passed, in order.
  // When the client closes, what still waits fails.
  void resend_loop() {
    std::unique_lock lock(resend_mu_);
    while (!resend_stopped_) {
      if (resends_.empty()) {
        resend_cv_.wait(lock);
        continue;
      }
      const auto [at, msg] = *resends_.begin();
      if (std::chrono::steady_clock::now() < at) {
        resend_cv_.wait_until(lock, at);
        continue;
      }
      resends_.erase(resends_.begin());
      lock.unlock();
      resend(msg);
      lock.lock();
    }
    auto left = std::move(resends_);
    resends_.clear();
    lock.unlock();
    for (const auto& waiting : left) fail(waiting.second);
  }

  void resend(natsMsg* msg) {
    std::string id;
    int64_t left = 0;
    {
      std::lock_guard lock(async_mu_);
      const auto it = in_flight_.find(msg);
      if (it == in_flight_.end()) {
        natsMsg_Destroy(msg);
        return;
      }
      id = it->second.id;
      left = ms_left(it->second.batch->deadline);
      spdlog::debug("nats: publish {}: {}; resending", id, it->second.error);
    }
    if (!stop_ && left > 0) {
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = id.c_str();
      po.MaxWait = std::min<int64_t>(left, 2000);
      const natsStatus s = js_PublishMsgAsync(js_, &msg, &po);
      if (s == NATS_OK) return;  // the library owns it again
      std::lock_guard lock(async_mu_);
      if (const auto it = in_flight_.find(msg); it != in_flight_.end()) it->second.error = "publish: " + describe(s);
    }
    fail(msg);
  }

  // The message could not be stored (deadline passed, or closing): its batch fails with the
  // reason of the last attempt.
  void fail(natsMsg* msg) {
    InFlight entry;
    {
      std::lock_guard lock(async_mu_);
      const auto it = in_flight_.find(msg);
      if (it == in_flight_.end()) {
        natsMsg_Destroy(msg);
        return;
      }
      entry = std::move(it->second);
      in_flight_.erase(it);
    }
    natsMsg_Destroy(msg);
    entry.batch->part_done(false, "JetStream did not ack " + entry.id + ": " + entry.error);
  }

  void stop_resender() {
    {
      std::lock_guard lock(resend_mu_);
      resend_stopped_ = true;
    }
    resend_cv_.notify_all();
    if (resender_.joinable()) resender_.join();
  }

  void connect() {
    natsOptions* opts = nullptr;
    if (natsOptions_Create(&opts) != NATS_OK) throw runtime_error("nats backend: out of memory");
    std::vector<const char*> servers;
    for (const auto& s : options_.servers) servers.push_back(s.c_str());
    natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size()));
    natsOptions_SetNoRandomize(opts, true);  // the first address is preferred, like --broker
    natsOptions_SetName(opts, "mcp-broker");
    natsOptions_SetMaxReconnect(opts, -1);   // a broker outlives any one server
    natsOptions_SetReconnectWait(opts, 100);
    natsOptions_SetReconnectJitter(opts, 100, 1000);
    natsOptions_SetTimeout(opts, 2000);
    natsOptions_SetReconnectBufSize(opts, 64 << 20);
    natsOptions_SetPingInterval(opts, 1000);
    natsOptions_SetMaxPingsOut(opts, 3);
    const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
    try {
      retry_until(deadline, "connecting to " + options_.servers.front(), [&]() -> std::string {
        const natsStatus s = natsConnection_Connect(&nc_, opts);
        return s == NATS_OK ? "" : describe(s);
      });
    } catch (...) {
      natsOptions_Destroy(opts);
      throw;
    }
    natsOptions_Destroy(opts);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 2000;
    jo.PublishAsync.AckHandler = &Impl::on_async_ack;
    jo.PublishAsync.AckHandlerClosure = this;
    jo.PublishAsync.MaxPending = 4096;  // then publish_async blocks: back pressure on agents
    jo.PublishAsync.StallWait = 5000;
    if (const natsStatus s = natsConnection_JetStream(&js_, nc_, &jo); s != NATS_OK)
      throw runtime_error("nats backend: jetstream context: " + describe(s));
    // Headroom for the message id and headers in the server's max payload.
    const int64_t max_payload = natsConnection_GetMaxPayload(nc_);
    max_message_bytes_ = static_cast<size_t>(std::max<int64_t>(64 << 10, max_payload - 4096));
  }

  void create_stream(std::chrono::steady_clock::time_point deadline) {
    const std::string subjects = std::string(kSubjectPrefix) + ".>";
    const char* subject_list[] = {subjects.c_str()};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = options_.stream.c_str();
    cfg.Subjects = subject_list;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Retention = js_LimitsPolicy;
    cfg.Discard = js_DiscardOld;
    cfg.MaxAge = options_.max_age.count();
    cfg.MaxBytes = options_.max_bytes;
    cfg.Replicas = options_.replicas;
    cfg.Duplicates = options_.duplicate_window.count();
    // Sources: the other domains' streams, through their JetStream API over the leaf node.
    std::vector<std::string> api_prefixes, filters;
    for (const auto& src : options_.sources) {
      api_prefixes.push_back("$JS." + src.domain + ".API");
      filters.push_back(subject_filter(src.service));
    }
    std::vector<jsExternalStream> externals(options_.sources.size());
    std::vector<jsStreamSource> sources(options_.sources.size());
    std::vector<jsStreamSource*> source_list;
    for (size_t i = 0; i < options_.sources.size(); ++i) {
      jsExternalStream_Init(&externals[i]);
      jsStreamSource_Init(&sources[i]);
      externals[i].APIPrefix = api_prefixes[i].c_str();
      externals[i].DeliverPrefix = "";  // libnats 3.4 writes it unconditionally: never null
      sources[i].Name = options_.stream.c_str();
      sources[i].FilterSubject = filters[i].c_str();
      sources[i].External = &externals[i];
      source_list.push_back(&sources[i]);
    }
    cfg.Sources = source_list.empty() ? nullptr : source_list.data();
    cfg.SourcesLen = static_cast<int>(source_list.size());
    retry_until(deadline, "creating stream " + options_.stream, [&]() -> std::string {
      jsErrCode code = static_cast<jsErrCode>(0);
      natsStatus s = js_AddStream(nullptr, js_, &cfg, nullptr, &code);
      if (s == NATS_OK) return "";
      if (code == JSStreamNameExistErr) {
        // Another broker made it (maybe with other limits): ours are applied, the last one wins.
        s = js_UpdateStream(nullptr, js_, &cfg, nullptr, &code);
        if (s == NATS_OK) return "";
        spdlog::warn("nats: stream {} exists and keeps its settings: {}", options_.stream,
                     describe(s, code));
        return "";
      }
      if (code == JSStreamReplicasNotSupportedErr)
        throw usage_error("nats backend: the server is not clustered; use --stream-replicas 1");
      return describe(s, code);
    });
  }

  // ttl: an entry not written again for this long goes (0: never).
  kvStore* create_bucket(std::chrono::steady_clock::time_point deadline, const std::string& name,
                         std::chrono::seconds ttl) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = name.c_str();
    cfg.History = 1;
    cfg.Replicas = options_.replicas;
    cfg.TTL = std::chrono::duration_cast<std::chrono::nanoseconds>(ttl).count();  // the stream's MaxAge
    kvStore* kv = nullptr;
    retry_until(deadline, "creating key-value bucket " + name, [&]() -> std::string {
      natsStatus s = js_CreateKeyValue(&kv, js_, &cfg);
      if (s == NATS_OK) return "";
      const std::string error = describe(s);
      s = js_KeyValue(&kv, js_, name.c_str());  // made elsewhere
      return s == NATS_OK ? "" : error;
    });
    return kv;
  }

 public:
  std::optional<std::string> bind_agent(const std::string& agent_id, const std::string& credential) {
    using Clock = std::chrono::steady_clock;
    // Refreshed (so the TTL starts again) at most this often; a stream open in between is
    // answered from the cache.
    const auto refresh = std::min<Clock::duration>(std::chrono::hours(1), options_.agent_expiry / 4);
    const auto now = Clock::now();
    {
      std::lock_guard lock(bindings_mu_);
      if (const auto it = bindings_.find(agent_id);
          it != bindings_.end() && (options_.agent_expiry.count() == 0 || now - it->second.second < refresh)) {
        if (it->second.first != credential) return it->second.first;
        return std::nullopt;
      }
    }
    // Keys allow [-/_=.a-zA-Z0-9]: the id in hex, whatever it holds.
    std::string key = "a.";
    for (unsigned char ch : agent_id) key += fmt::format("{:02x}", ch);
    std::string holder;
    for (int attempt = 0;; ++attempt) {
      kvEntry* entry = nullptr;
      natsStatus s = kvStore_Get(&entry, agents_kv_, key.c_str());
      if (s == NATS_OK) {
        holder.assign(static_cast<const char*>(kvEntry_Value(entry)), static_cast<size_t>(kvEntry_ValueLen(entry)));
        kvEntry_Destroy(entry);
        if (holder == credential && options_.agent_expiry.count() > 0) {
          uint64_t revision = 0;
          s = kvStore_Put(&revision, agents_kv_, key.c_str(), credential.data(), static_cast<int>(credential.size()));
          if (s != NATS_OK) throw runtime_error("nats backend: refreshing agent " + agent_id + ": " + describe(s));
        }
        break;
      }
      if (s != NATS_NOT_FOUND) throw runtime_error("nats backend: reading agent " + agent_id + ": " + describe(s));
      uint64_t revision = 0;
      s = kvStore_Create(&revision, agents_kv_, key.c_str(), credential.data(), static_cast<int>(credential.size()));
      if (s == NATS_OK) {
        holder = credential;
        break;
      }
      // Another broker bound it between the read and the create: read its answer.
      if (attempt == 2) throw runtime_error("nats backend: binding agent " + agent_id + ": " + describe(s));
    }
    std::lock_guard lock(bindings_mu_);
    bindings_[agent_id] = {holder, now};
    if (holder != credential) return holder;
    return std::nullopt;
  }

  // "m.<hex agent>.<incarnation %x>" in the agent bucket: a decimal mark.
  static std::string mark_key(const std::string& agent_id, uint64_t incarnation) {
    std::string key = "m.";
    for (unsigned char ch : agent_id) key += fmt::format("{:02x}", ch);
    return key + fmt::format(".{:x}", incarnation);
  }

  uint64_t load_mark(const std::string& agent_id, uint64_t incarnation) {
    kvEntry* entry = nullptr;
    const natsStatus s = kvStore_Get(&entry, agents_kv_, mark_key(agent_id, incarnation).c_str());
    if (s == NATS_NOT_FOUND) return 0;
    if (s != NATS_OK) throw runtime_error("nats backend: reading the mark of agent " + agent_id + ": " + describe(s));
    const std::string text(static_cast<const char*>(kvEntry_Value(entry)), static_cast<size_t>(kvEntry_ValueLen(entry)));
    kvEntry_Destroy(entry);
    return std::strtoull(text.c_str(), nullptr, 10);
  }

  void store_mark(const std::string& agent_id, uint64_t incarnation, uint64_t mark) {
    const std::string text = std::to_string(mark);
    uint64_t revision = 0;
    const natsStatus s = kvStore_Put(&revision, agents_kv_, mark_key(agent_id, incarnation).c_str(), text.data(),
                                     static_cast<int>(text.size()));
    if (s != NATS_OK) throw runtime_error("nats backend: writing the mark of agent " + agent_id + ": " + describe(s));
  }

 private:

  void start_watcher(std::chrono::steady_clock::time_point deadline) {
    retry_until(deadline, "watching " + options_.policy_bucket, [&]() -> std::string {
      const natsStatus s = kvStore_WatchAll(&watcher_, kv_, nullptr);
      return s == NATS_OK ? "" : describe(s);
    });
    watch_thread_ = std::thread([this] { watch_loop(); });
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return initial_loaded_; }))
      throw runtime_error("nats backend: timed out loading policies from " + options_.policy_bucket);
  }

  void watch_loop() {
    while (!stop_) {
      kvEntry* entry = nullptr;
      const natsStatus s = kvWatcher_Next(&entry, watcher_, 200);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) {
        if (stop_) return;
        spdlog::debug("nats: policy watcher: {}", natsStatus_GetText(s));
        std::this_thread::sleep_for(100ms);
        continue;
      }
      if (entry == nullptr) {  // the end of the initial values
        std::lock_guard lock(mu_);
        initial_loaded_ = true;
        cv_.notify_all();
        continue;
      }
      handle(entry);
      kvEntry_Destroy(entry);
    }
  }

  void handle(kvEntry* entry) {
    const uint64_t revision = kvEntry_Revision(entry);
    uint32_t pushed = 0;
    if (kvEntry_Operation(entry) == kvOp_Put) {
      mcp::v1::Policy p;
      bool valid = p.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
      try {
        if (valid) validate_policy(p);  // written by an older broker, or by hand
      } catch (const Error& e) {
        spdlog::warn("nats: policy {} quarantined (not applied): {}", kvEntry_Key(entry), e.what());
        valid = false;
      }
      if (valid) {
        {
          std::lock_guard lock(mu_);
          policies_[key_of(p)] = p;
        }
        if (on_policy_) pushed = on_policy_(p);
      } else {
        spdlog::warn("nats: unreadable or invalid policy {} ignored", kvEntry_Key(entry));
      }
    } else if (const auto key = parse_policy_key(kvEntry_Key(entry))) {
      // Deleted (by any broker): gone here too, and this broker's agents are told, whether or
      // not remove_policy() here erased it first.
      {
        std::lock_guard lock(mu_);
        policies_.erase(*key);
      }
      if (on_policy_) pushed = on_policy_(removal_of(*key));
    } else {
      spdlog::warn("nats: deleted key {} is not a policy key; ignored", kvEntry_Key(entry));
    }
    std::lock_guard lock(mu_);
    seen_revision_ = std::max(seen_revision_, revision);
    pushed_by_revision_[revision] = pushed;
    while (pushed_by_revision_.size() > 256) pushed_by_revision_.erase(pushed_by_revision_.begin());
    cv_.notify_all();
  }

  bool publish_one(const std::string& subject, const std::string& id, const std::string& data,
                   std::chrono::steady_clock::time_point deadline) {
    std::string error;
    for (;;) {
      const int64_t left = ms_left(deadline);
      if (left <= 0) break;
      natsMsg* msg = nullptr;
      natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, data.data(),
                                    static_cast<int>(data.size()));
      if (s != NATS_OK) throw runtime_error("nats backend: message: " + describe(s));
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = id.c_str();
      po.MaxWait = std::min<int64_t>(left, 2000);
      jsPubAck* ack = nullptr;
      jsErrCode code = static_cast<jsErrCode>(0);
      s = js_PublishMsg(&ack, js_, msg, &po, &code);
      natsMsg_Destroy(msg);
      if (s == NATS_OK) {
        const bool duplicate = ack->Duplicate;
        jsPubAck_Destroy(ack);
        return duplicate;
      }
      error = describe(s, code);
      spdlog::debug("nats: publish {} on {}: {}; retrying", id, subject, error);
      if (stop_) break;
      // The same id again: if the first attempt was stored, JetStream reports a duplicate.
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(50ms,
                                                                      std::chrono::milliseconds(left)));
    }
    throw runtime_error("nats backend: JetStream did not ack " + id + ": " + error);
  }

  void close() {
    stop_ = true;
    stop_resender();  // before the context goes: it publishes through js_
    if (watch_thread_.joinable()) {
      kvWatcher_Stop(watcher_);
      watch_thread_.join();
    }
    if (watcher_ != nullptr) kvWatcher_Destroy(watcher_);
    watcher_ = nullptr;
    if (kv_ != nullptr) kvStore_Destroy(kv_);
    kv_ = nullptr;
    if (agents_kv_ != nullptr) kvStore_Destroy(agents_kv_);
    agents_kv_ = nullptr;
    if (js_ != nullptr) jsCtx_Destroy(js_);
    js_ = nullptr;
    if (nc_ != nullptr) {
      natsConnection_Close(nc_);
      natsConnection_Destroy(nc_);
    }
    nc_ = nullptr;
  }

  NatsBackendOptions options_;
  PolicyListener on_policy_;
  const std::shared_ptr<clock::ClockSource> clock_;  // stamps applied policies
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  kvStore* kv_ = nullptr;
  kvStore* agents_kv_ = nullptr;
  std::mutex bindings_mu_;
  std::unordered_map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> bindings_;
  kvWatcher* watcher_ = nullptr;
  size_t max_message_bytes_ = 1 << 20;
  std::atomic<bool> stop_{false};
  std::thread watch_thread_;
  std::mutex async_mu_;
  std::map<natsMsg*, InFlight> in_flight_;  // guarded by async_mu_: sent, or waiting for a resend
  std::mutex resend_mu_;
  std::condition_variable resend_cv_;
  // Guarded by resend_mu_: failed messages by the time they are due to be sent again.
  std::multimap<std::chrono::steady_clock::time_point, natsMsg*> resends_;
  bool resend_stopped_ = false;  // guarded by resend_mu_
  std::thread resender_;  // resend_loop()

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::map<PolicyKey, mcp::v1::Policy> policies_;
  bool initial_loaded_ = false;
  uint64_t seen_revision_ = 0;
  std::map<uint64_t, uint32_t> pushed_by_revision_;
};

JetStreamClient::JetStreamClient(NatsBackendOptions options, PolicyListener on_policy,
                                 std::shared_ptr<clock::ClockSource> clock)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(on_policy), std::move(clock))) {}
JetStreamClient::~JetStreamClient() = default;
PublishOutcome JetStreamClient::publish(const mcp::v1::SamplePacket& packet,
                                    const mcp::v1::EventBlock* block) {
  return impl_->publish(packet, block);
}
std::unique_ptr<JetStreamClient::Feed> JetStreamClient::subscribe(const std::string& service,
                                                          uint64_t resume_after) {
  return impl_->subscribe(service, resume_after);
}
void JetStreamClient::publish_async(const mcp::v1::SamplePacket& packet,
                                const mcp::v1::EventBlock* block, PublishDone done) {
  impl_->publish_async(packet, block, std::move(done));
}
mcp::v1::Policy JetStreamClient::apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) {
  return impl_->apply_policy(policy, pushed);
}
std::vector<mcp::v1::Policy> JetStreamClient::policies() const { return impl_->policies(); }
std::optional<std::string> JetStreamClient::bind_agent(const std::string& agent_id, const std::string& credential) {
  return impl_->bind_agent(agent_id, credential);
}
uint64_t JetStreamClient::load_mark(const std::string& agent_id, uint64_t incarnation) {
  return impl_->load_mark(agent_id, incarnation);
}
void JetStreamClient::store_mark(const std::string& agent_id, uint64_t incarnation, uint64_t mark) {
  impl_->store_mark(agent_id, incarnation, mark);
}
bool JetStreamClient::remove_policy(const PolicyKey& key) {
  return impl_->remove_policy(key);
}

}  // namespace mcp::broker
