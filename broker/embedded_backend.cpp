// The embedded backend (backend.h): journal, dedup marks, subscriber queues and policies in
// this process. The dedup marks (state_dir/agents.json) are not rewritten per batch (a file
// rename per batch was a fifth of the broker's CPU at 200k events/s): the journal holds every
// batch's (agent, sequence), so the file is written when an id is first bound to a credential
// (that binding is in no journal record), when the journal starts a segment and on stop. On
// start the two newest segments repair the marks: everything after the last snapshot is there
// (a kill between a segment's first append and its snapshot leaves the previous segment's tail
// unsnapshotted), so a replay after a restart is still delivered once. A subscriber resuming
// with resume_after = its last packet offset first gets the journal's later packets, then live
// ones. Every subscription is told, in its initial metadata, the journal's id and the offset its
// live packets start at (x-mcp-journal, x-mcp-journal-next), so a subscriber that has received
// nothing yet can still resume from where it subscribed; one resuming in another journal (this
// broker lost its state) gets the whole journal.
#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "broker/backend.h"
#include "broker/broker.h"
#include "broker/dedup_table.h"
#include "broker/packet_forms.h"
#include "broker/policy_store.h"
#include "broker/subscriber_queue.h"
#include "common/journal_headers.h"
#include "spool/segment_log.h"

namespace mcp::broker {
namespace {

using grpc::Status;
using grpc::StatusCode;

uint64_t unix_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

struct Subscriber {
  SubscriptionFilter filter;
  bool compact;  // wants SamplePacket.events
  SubscriberQueue queue;
  Subscriber(SubscriptionFilter f, bool c, size_t capacity)
      : filter(std::move(f)), compact(c), queue(capacity) {}
};

class EmbeddedBackend final : public Backend {
 public:
  EmbeddedBackend(const BrokerOptions& options, PolicyListener push)
      : subscriber_queue_(options.subscriber_queue),
        push_(std::move(push)),
        journal_(SegmentLogOptions{
            options.state_dir.empty() ? std::filesystem::path() : options.state_dir / "journal",
            4ull << 20,
            options.state_dir.empty() ? std::min<uint64_t>(options.journal_max_bytes, 64ull << 20)
                                      : options.journal_max_bytes}),
        dedup_(options.state_dir.empty() ? std::filesystem::path() : options.state_dir / "agents.json"),
        agent_expiry_(options.agent_expiry),
        policies_(options.state_dir.empty() ? std::filesystem::path()
                                            : options.state_dir / "policies.json") {
    for (const auto& record : journal_.newest_segments(2)) {
      mcp::v1::SamplePacket packet;
      if (packet.ParseFromString(record.payload))
        dedup_.advance(packet.agent_id(), packet.incarnation(), packet.sequence(), unix_us());
    }
    expire_agents();
    snapshot_segment_ = journal_.newest_segment_start();
  }

  ~EmbeddedBackend() override { persist_marks(); }

  // Under mu_ so journal order is delivery order.
  Status store(const std::string& agent_id, const std::string& credential, PreparedBatch& batch,
               bool* duplicate, const std::function<void()>& on_stored) override {
    mcp::v1::SamplePacket& packet = *batch.packet;
    const uint64_t seq = packet.sequence();
    const uint64_t incarnation = packet.incarnation();
    std::lock_guard lock(mu_);
    const uint64_t now_us = unix_us();
    switch (dedup_.check(agent_id, incarnation, credential, seq, now_us)) {
      case Admission::kDuplicate:
        *duplicate = true;
        return Status::OK;
      case Admission::kForeignCredential:
        return Status(StatusCode::PERMISSION_DENIED,
                      "agent id '" + agent_id + "' is bound to another credential");
      case Admission::kBeyondWindow:
        return Status(StatusCode::INVALID_ARGUMENT,
                      "sequence " + std::to_string(seq) + " is too far past the last stored " +
                          std::to_string(dedup_.high_water(agent_id, incarnation)) +
                          " of this agent's incarnation (see 'Broker limits')");
      case Admission::kNew:
        break;
    }
    *duplicate = false;
    packet.set_journal(journal_.id());
    const uint64_t offset = journal_.append(packet.SerializeAsString(), batch.events());
    const uint64_t segment = journal_.newest_segment_start();
    dedup_.record(agent_id, incarnation, credential, seq, now_us);  // a binding is appended at once
    if (segment != snapshot_segment_) {
      snapshot_segment_ = segment;
      expire_agents();
      dedup_.persist();
    }
    packet.set_offset(offset);
    on_stored();
    // Each form (v1 samples, compact block) is built at most once for all subscribers.
    PacketForms forms(batch.packet, batch.block);
    for (const auto& sub : subscribers_) {
      uint64_t n = 0;
      if (PacketPtr p = forms.for_subscriber(sub->filter, sub->compact, &n)) sub->queue.push(std::move(p), n);
    }
    return Status::OK;
  }

  Status subscribe(grpc::ServerContext* ctx, const mcp::v1::SubscriptionRequest& req,
                   grpc::ServerWriter<mcp::v1::SamplePacket>* writer) override {
    const size_t capacity = req.queue_packets() == 0
                                ? subscriber_queue_
                                : std::min<size_t>(req.queue_packets(), subscriber_queue_);
    auto sub = std::make_shared<Subscriber>(SubscriptionFilter::from(req), req.compact(), capacity);
    uint64_t live_from = 0;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
      subscribers_.insert(sub);
      live_from = journal_.stats().next_offset;
    }
    spdlog::info("subscriber {} (service '{}', rate {}{})", ctx->peer(), req.service_name(),
                 sub->filter.rate, sub->compact ? ", compact" : "");
    ctx->AddInitialMetadata(std::string(kJournalHeader), std::to_string(journal_.id()));
    ctx->AddInitialMetadata(std::string(kJournalNextHeader), std::to_string(live_from));
    uint64_t last = 0;
    writer->SendInitialMetadata();
    bool ok = true;
    if (req.resume_after() > 0 || req.resume_journal() != 0) {
      const bool same_journal = req.resume_journal() == 0 || req.resume_journal() == journal_.id();
      uint64_t from = same_journal ? req.resume_after() + 1 : 0;
      while (ok && !ctx->IsCancelled()) {
        auto records = journal_.read_from(from, 64);
        bool caught_up = records.empty();
        for (auto& record : records) {
          if (record.offset >= live_from) {
            caught_up = true;
            break;
          }
          from = record.offset + 1;
          auto packet = std::make_shared<mcp::v1::SamplePacket>();
          if (record.damaged || !packet->ParseFromString(record.payload)) continue;
          packet->set_offset(record.offset);
          PacketForms forms(std::move(packet));
          const PacketPtr p = forms.for_subscriber(sub->filter, sub->compact);
          if (!p) continue;
          if (!(ok = writer->Write(*p))) break;
          last = record.offset;
        }
        if (caught_up) break;
      }
    }
    mcp::v1::SamplePacket out;
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

  uint32_t subscribers() const override {
    std::lock_guard lock(mu_);
    return static_cast<uint32_t>(subscribers_.size());
  }

  uint64_t subscriber_dropped_packets() const override {
    std::lock_guard lock(mu_);
    uint64_t dropped = subscriber_dropped_;
    for (const auto& s : subscribers_) dropped += s->queue.total_dropped().packets;
    return dropped;
  }

  mcp::v1::Policy apply_policy(const mcp::v1::Policy& policy, uint32_t* pushed) override {
    mcp::v1::Policy stored;
    {
      std::lock_guard lock(mu_);
      stored = policies_.apply(policy);
    }
    *pushed = push_(stored);
    return stored;
  }

  std::vector<mcp::v1::Policy> policies() const override {
    std::lock_guard lock(mu_);
    return policies_.list();
  }

  bool remove_policy(const PolicyKey& key) override {
    {
      std::lock_guard lock(mu_);
      if (!policies_.remove(key)) return false;
    }
    push_(removal_of(key));
    return true;
  }

  void stop() override {
    std::vector<std::shared_ptr<Subscriber>> subs;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      subs.assign(subscribers_.begin(), subscribers_.end());
    }
    for (auto& s : subs) s->queue.close();
    persist_marks();
  }

 private:
  const size_t subscriber_queue_;
  PolicyListener push_;
  mutable std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  SegmentLog journal_;
  DedupTable dedup_;
  const std::chrono::seconds agent_expiry_;
  PolicyStore policies_;
  std::set<std::shared_ptr<Subscriber>> subscribers_;
  uint64_t subscriber_dropped_ = 0;
  uint64_t snapshot_segment_ = 0;  // the journal segment the marks file was last written in

  void expire_agents() {
    if (const size_t gone = dedup_.expire(unix_us(), agent_expiry_))
      spdlog::info("broker: forgot {} agent ids unseen for {} s (--agent-expiry); {} known", gone,
                   agent_expiry_.count(), dedup_.agents());
  }

  // On stop: a restart then needs no journal repair. A failure is logged, not thrown (the
  // journal still repairs the marks).
  void persist_marks() noexcept {
    std::lock_guard lock(mu_);
    try {
      dedup_.persist();
    } catch (const std::exception& e) {
      spdlog::warn("{}", e.what());
    }
  }
};

}  // namespace

void Backend::store_async(PreparedBatch&, StoreDone done) { done(false, "not a pipelined backend"); }

std::unique_ptr<Backend> make_embedded_backend(const BrokerOptions& options,
                                               Backend::PolicyListener push) {
  return std::make_unique<EmbeddedBackend>(options, std::move(push));
}

}  // namespace mcp::broker
