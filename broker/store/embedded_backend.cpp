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

#include "broker/store/backend.h"
#include "broker/options.h"
#include "broker/store/dedup_table.h"
#include "broker/fanout/packet_forms.h"
#include "broker/policy/policy_store.h"
#include "broker/fanout/subscriber_queue.h"
#include "clock/clock_source.h"
#include "common/journal_headers.h"
#include "spool/segment_log.h"

namespace mcp::broker {
namespace {

using grpc::Status;
using grpc::StatusCode;

struct Subscriber {
  SubscriptionFilter filter;
  bool compact;  // wants SamplePacket.events
  std::shared_ptr<SubscriberQueue> queue;
};

class EmbeddedBackend final : public Backend {
 public:
  EmbeddedBackend(const BrokerOptions& options, PolicyListener push)
      : clock_(clock::clock_or_system(options.clock)),
        push_(std::move(push)),
        journal_(SegmentLogOptions{
            options.state_dir.empty() ? std::filesystem::path() : options.state_dir / "journal",
            4ull << 20,
            options.state_dir.empty() ? std::min<uint64_t>(options.journal_max_bytes, 64ull << 20)
                                      : options.journal_max_bytes}),
        dedup_(options.state_dir.empty() ? std::filesystem::path() : options.state_dir / "agents.json",
               unix_us(*clock_)),
        agent_expiry_(options.agent_expiry),
        policies_(options.state_dir.empty() ? std::filesystem::path() : options.state_dir / "policies.json",
                  clock_) {
    for (const auto& record : journal_.newest_segments(2)) {
      mcp::v1::SamplePacket packet;
      if (packet.ParseFromString(record.payload))
        dedup_.advance(packet.agent_id(), packet.incarnation(), packet.sequence(), unix_us(*clock_));
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
    const uint64_t now = unix_us(*clock_);
    switch (dedup_.check(agent_id, incarnation, credential, seq, now)) {
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
      case Admission::kIncarnationsInUse:
        return Status(StatusCode::FAILED_PRECONDITION,
                      "agent id '" + agent_id + "' already has " + std::to_string(kMaxIncarnations) +
                          " incarnations in use within 10 minutes; a new one is refused until one is "
                          "unused that long (see 'Broker limits')");
      case Admission::kNew:
        break;
    }
    *duplicate = false;
    packet.set_journal(journal_.id());
    const uint64_t offset = journal_.append(packet.SerializeAsString(), batch.events());
    const uint64_t segment = journal_.newest_segment_start();
    dedup_.record(agent_id, incarnation, credential, seq, now);  // a binding is appended at once
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
      if (PacketPtr p = forms.for_subscriber(sub->filter, sub->compact, &n)) sub->queue->push(std::move(p), n);
    }
    return Status::OK;
  }

  Status subscribe(const mcp::v1::SubscriptionRequest& req, const std::string& peer,
                   std::shared_ptr<SubscriberQueue> queue, Metadata* metadata,
                   std::unique_ptr<Subscription>* out) override {
    auto sub = std::make_shared<Subscriber>(Subscriber{SubscriptionFilter::from(req), req.compact(), std::move(queue)});
    uint64_t live_from = 0;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Status(StatusCode::UNAVAILABLE, "broker stopping");
      subscribers_.insert(sub);
      live_from = journal_.stats().next_offset;
    }
    spdlog::info("subscriber {} (service '{}', rate {}{})", peer, req.service_name(), sub->filter.rate,
                 sub->compact ? ", compact" : "");
    metadata->emplace_back(kJournalHeader, std::to_string(journal_.id()));
    metadata->emplace_back(kJournalNextHeader, std::to_string(live_from));
    uint64_t from = live_from;  // nothing to replay
    if (req.resume_after() > 0 || req.resume_journal() != 0) {
      const bool same_journal = req.resume_journal() == 0 || req.resume_journal() == journal_.id();
      from = same_journal ? req.resume_after() + 1 : 0;
    }
    *out = std::make_unique<Feed>(this, std::move(sub), from, live_from);
    return Status::OK;
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
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    persist_marks();
  }

 private:
  const std::shared_ptr<clock::ClockSource> clock_;  // BrokerOptions::clock: expiry, marks, policy stamps
  PolicyListener push_;
  mutable std::mutex mu_;  // guards everything below
  bool stopping_ = false;
  SegmentLog journal_;
  DedupTable dedup_;
  const std::chrono::seconds agent_expiry_;
  PolicyStore policies_;
  std::set<std::shared_ptr<Subscriber>> subscribers_;
  uint64_t snapshot_segment_ = 0;  // the journal segment the marks file was last written in

  // A subscription: live packets reach its queue from store(); a resumed one first replays
  // the journal from `from` up to where its live packets start.
  class Feed final : public Subscription {
   public:
    Feed(EmbeddedBackend* backend, std::shared_ptr<Subscriber> sub, uint64_t from, uint64_t live_from)
        : backend_(backend), sub_(std::move(sub)), from_(from), live_from_(live_from) {}
    ~Feed() override {
      std::lock_guard lock(backend_->mu_);
      backend_->subscribers_.erase(sub_);
    }
    std::vector<PacketPtr> backlog() override {
      std::vector<PacketPtr> out;
      while (out.empty() && from_ < live_from_) {
        auto records = backend_->journal_.read_from(from_, 64);
        if (records.empty()) break;
        for (auto& record : records) {
          if (record.offset >= live_from_) {
            from_ = live_from_;
            break;
          }
          from_ = record.offset + 1;
          auto packet = std::make_shared<mcp::v1::SamplePacket>();
          if (record.damaged || !packet->ParseFromString(record.payload)) continue;
          packet->set_offset(record.offset);
          PacketForms forms(std::move(packet));
          if (PacketPtr p = forms.for_subscriber(sub_->filter, sub_->compact)) out.push_back(std::move(p));
        }
      }
      if (out.empty()) from_ = live_from_;
      return out;
    }

   private:
    EmbeddedBackend* const backend_;
    const std::shared_ptr<Subscriber> sub_;
    uint64_t from_;
    const uint64_t live_from_;
  };

  void expire_agents() {
    if (const size_t gone = dedup_.expire(unix_us(*clock_), agent_expiry_))
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
