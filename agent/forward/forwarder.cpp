#include "forward/forwarder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "clock/unix_time.h"
#include "common/backoff.h"
#include "common/error.h"
#include "common/setting_names.h"
#include "common/utf8.h"
#include "forward/agent_id.h"
#include "forward/batch_closer.h"
#include "forward/channel.h"
#include "wire/event_block.h"
#include "spool/segment_log.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp {
namespace {

using clock::unix_ns;

}  // namespace

std::string policy_line(std::string_view service, std::string_view probe, double sampling_rate, double target_qps,
                        std::string_view trace_id_prefix) {
  std::string line = fmt::format("service={} probe={} sampling_rate={:g} target_qps={:g}", service.empty() ? "*" : service,
                                 probe.empty() ? "*" : probe, sampling_rate, target_qps);
  if (!trace_id_prefix.empty()) line += fmt::format(" trace_id_prefix={}", trace_id_prefix);
  return line;
}

std::vector<std::string> parse_broker_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    const auto e = item.find_last_not_of(" \t");
    out.push_back(item.substr(b, e - b + 1));
  }
  if (out.empty()) throw usage_error(setting_name(Setting::kBrokers) + " needs at least one HOST:PORT");
  return out;
}

Compression parse_compression(const std::string& name) {
  if (name == "none") return Compression::kNone;
  if (name == "gzip") return Compression::kGzip;
  throw usage_error("unknown compression '" + name + "' (use none or gzip)");
}

class Forwarder::Impl {
 public:
  explicit Impl(ForwarderOptions options)
      : options_(std::move(options)),
        log_(SegmentLogOptions{options_.spool_dir, options_.spool_segment_bytes,
                               options_.spool_max_bytes}),
        closer_(BatchCloser::Rules{options_.batch_count, options_.batch_age, options_.batch_linger,
                                   options_.batch_burst, options_.batch_gap}) {
    if (options_.brokers.empty()) throw usage_error("forwarder: no broker address");
    if (options_.batch_count == 0) throw usage_error("forwarder: batch count must be > 0");
    if (options_.agent_id.empty()) options_.agent_id = unique_agent_id();
    options_.agent_id = valid_utf8(options_.agent_id);
    token_ = read_token_file(options_.token_file);
    sender_ = std::thread([this] { send_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      if (context_) context_->TryCancel();
    }
    scv_.notify_all();
    fcv_.notify_all();
    sender_.join();
  }

  // Encodes the event straight into the open block (no per-event message or queue node); a
  // full block is written to the spool here, on the caller's thread, and the sender woken.
  void consume(const Event& event) {
    flush_failed_.store(false, std::memory_order_relaxed);
    Wake wake = Wake::kNone;
    {
      std::lock_guard lock(qmu_);
      open_.add(event);
      wake = act_locked(closer_.added(open_.size()));
    }
    notify(wake);
  }

  // The caller's burst is over (the runtime calls this after each ring poll): while the broker
  // has acknowledged everything, the open block goes now (under heavy traffic, once batch_gap
  // has passed since the last batch: the sender times it); otherwise at batch_age, at
  // batch_count, or on the ack that leaves nothing in flight (the reader ships it then).
  void poll_done() {
    Wake wake = Wake::kNone;
    {
      std::lock_guard lock(qmu_);
      wake = act_locked(closer_.burst_ended(open_.size(), wire_idle_.load()));
    }
    notify(wake);
  }

  void consume_counts(const std::vector<ProbeIntervalCounts>& counts) {
    bool shipped = false;
    {
      std::lock_guard lock(qmu_);
      for (const auto& c : counts) {
        auto& p = counts_.emplace_back();
        p.set_service(c.service);
        p.set_probe(c.probe);
        p.set_seen(c.seen);
        p.set_kept(c.kept);
        p.set_lost(c.lost);
        p.set_quota_dropped(c.quota_dropped);
        p.set_orphaned(c.orphaned);
        p.set_delivered(c.delivered);
        p.set_estimate(c.estimate);
      }
      // About one a second: ship the counters at once, with the open block.
      shipped = ship_locked();
    }
    if (shipped) wake_sender();
  }

  bool flush_for(std::chrono::milliseconds timeout) {
    const bool done = wait_flushed(timeout);
    flush_failed_.store(!done, std::memory_order_relaxed);
    return done;
  }

  bool flush_failed() const { return flush_failed_.load(std::memory_order_relaxed); }

  bool wait_flushed(std::chrono::milliseconds timeout) {
    if (timeout.count() < 0) timeout = options_.flush_timeout;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool shipped = false;
    {
      std::lock_guard lock(qmu_);
      shipped = ship_locked();
    }
    if (shipped) wake_sender();
    std::unique_lock lock(mu_);
    return fcv_.wait_until(lock, deadline, [&] { return log_.last_offset() == 0 || !refused_.empty(); }) &&
           log_.last_offset() == 0;
  }

  ForwarderStats stats() const {
    ForwarderStats s;
    const SegmentLogStats log = log_.stats();
    {
      std::lock_guard lock(qmu_);
      s.queued = open_.size();
      s.dropped_oldest = append_dropped_;
    }
    s.dropped_oldest += log.dropped_items;
    s.spooled_bytes = log.bytes;
    s.spooled_batches = log.records;
    s.unacked = log.items;
    s.corrupt_batches = log.corrupt_records;
    s.spool_dir = options_.spool_dir.string();
    std::lock_guard lock(mu_);
    s.sent = sent_;
    s.acked = acked_;
    s.forward_errors = errors_;
    s.reconnects = reconnects_;
    s.unreadable_batches = unreadable_batches_;
    s.unreadable_events = unreadable_events_;
    s.connected = connected_;
    s.broker = broker_;
    s.refused = refused_;
    return s;
  }

  std::string refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }

  void set_policy_refusals(std::vector<PolicyRefusal> refusals) {
    mcp::v1::PolicyStatus status;
    for (auto& r : refusals) {
      if (status.refusals_size() == 256) break;  // the broker's bound
      auto* out = status.add_refusals();
      out->set_service(r.service);
      out->set_probe(r.probe);
      out->set_trace_id_prefix(r.trace_id_prefix);
      out->set_reason(r.reason);
      for (size_t i = 0; i < r.refused_by.size() && i < 16; i++) out->add_refused_by(valid_utf8(r.refused_by[i]));
    }
    {
      std::lock_guard lock(mu_);
      if (status.SerializeAsString() == refusals_.SerializeAsString()) return;
      refusals_ = std::move(status);
      refusals_dirty_ = true;
    }
    scv_.notify_all();
  }

 private:
  // Under qmu_: closes the open block into a Batch with the pending counters and writes it
  // ahead into the spool, whose offset becomes its sequence. Appending under qmu_ keeps the
  // spool in the order events were consumed, whichever thread ships. False: nothing to ship,
  // or the append failed (its events are counted as dropped).
  bool ship_locked() {
    const auto events = static_cast<uint32_t>(open_.size());
    if (events == 0 && counts_.empty()) return false;
    // The spool holds the Batch with its events still encoded (Batch.events): the sender
    // ships it as stored, nothing is parsed back into per-event messages.
    batch_.Clear();
    closer_.closed(events);
    if (events) open_.finish(*batch_.mutable_events());
    for (auto& c : counts_) *batch_.add_counts() = std::move(c);
    counts_.clear();
    batch_.set_created_unix_ns(unix_ns());
    record_.clear();
    batch_.AppendToString(&record_);
    try {
      log_.append(record_, events);
    } catch (const std::exception& e) {
      spdlog::error("forward: {}", e.what());
      append_dropped_ += events;
      return false;
    }
    return true;
  }

  // Who to wake once qmu_ is released: the sender for a batch in the spool, or the sender as
  // the timer of a block it must time (rearm).
  enum class Wake { kNone, kSender, kTimer };
  // Under qmu_: carries out the closer's answer.
  Wake act_locked(BatchCloser::Action action) {
    switch (action) {
      case BatchCloser::Action::kClose:
        return ship_locked() ? Wake::kSender : Wake::kNone;
      case BatchCloser::Action::kTime:
        return Wake::kTimer;
      case BatchCloser::Action::kKeep:
        break;
    }
    return Wake::kNone;
  }
  void notify(Wake wake) {
    if (wake == Wake::kSender) wake_sender();
    else if (wake == Wake::kTimer) rearm_sender();
  }

  // A batch is in the spool: the sender checks the spool under mu_ before it sleeps, so
  // passing through mu_ means it either sees the batch or is already waiting for the notify.
  void wake_sender() {
    { std::lock_guard lock(mu_); }
    scv_.notify_one();
  }

  // A block started and nobody calls poll_done(): the sender must time it (batch_linger/age).
  void rearm_sender() {
    {
      std::lock_guard lock(mu_);
      rearm_ = true;
    }
    scv_.notify_one();
  }

  // Sender thread, the closer's timer: ships the open block once it is due; returns when to
  // look again.
  std::chrono::steady_clock::time_point ship_if_due() {
    std::lock_guard lock(qmu_);
    const BatchCloser::Due due = closer_.due(open_.size(), wire_idle_.load());
    if (due.close) ship_locked();  // the caller is the sender: no wake-up needed
    return due.next;
  }

  // Reader thread: nothing is in flight any more. What waited for that goes now.
  void ship_on_idle() {
    Wake wake = Wake::kNone;
    {
      std::lock_guard lock(qmu_);
      wake = act_locked(closer_.wire_idle(open_.size()));
    }
    notify(wake);
  }

  void sleep_backoff(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    scv_.wait_for(lock, wait, [&] { return stop_.load(); });
  }

  // Refused: every broker of the list, each at its last stream, turned the credential away
  // (a fail-over list may hold one that takes it). Kept until a stream gets an acknowledgement.
  // Under mu_, with the stream's error counted: a drain woken by it sees both.
  void note_refusal(const std::string& address, bool progressed) {
    const grpc::StatusCode code = ended_.error_code();
    const size_t brokers = std::set<std::string>(options_.brokers.begin(), options_.brokers.end()).size();
    if (!progressed && (code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED)) {
      refused_by_.insert(address);
      if (refused_by_.size() == brokers) {
        refused_ = fmt::format("broker {} refused this agent: {} ({})", address, valid_utf8(ended_.error_message()),
                               code == grpc::StatusCode::UNAUTHENTICATED ? "UNAUTHENTICATED" : "PERMISSION_DENIED");
        fcv_.notify_all();  // a drain waiting for acknowledgements stops waiting
      }
      return;
    }
    refused_by_.erase(address);  // unreachable or closed: not known to refuse
    if (progressed) refused_by_.clear();
    if (refused_by_.size() < brokers) refused_.clear();
  }

  void send_loop() {
    // Jittered, so restarted agents do not reconnect in step; the next broker after each failure.
    Backoff backoff(options_.backoff_initial, options_.backoff_max, options_.brokers.size());
    bool first = true;
    for (;;) {
      const size_t address = backoff.endpoint();
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        if (!first) ++reconnects_;
        first = false;
        broker_ = options_.brokers[address];
      }
      const bool progressed = run_stream(options_.brokers[address]);
      {
        std::lock_guard lock(mu_);
        connected_ = false;
        wire_idle_.store(false);  // disconnected: batch fully again
        if (stop_) return;
        ++errors_;
        note_refusal(options_.brokers[address], progressed);
      }
      if (progressed) backoff.succeeded();
      sleep_backoff(backoff.failed());
    }
  }

  // One Publish stream to one broker, from its opening to its end. The sender thread (run())
  // replays every unacknowledged batch in order, then follows the spool; the reader thread
  // (read_loop()) takes the broker's acks and policies. The members are this stream's state;
  // what outlives the stream is the Impl's, reached through impl_ under its locks.
  class PublishSession {
   public:
    PublishSession(Impl& impl, std::string address) : impl_(impl), address_(std::move(address)) {}
    ~PublishSession() {
      if (!reader_.joinable()) return;  // run() finished; otherwise it was left by an exception
      context_.TryCancel();
      reader_.join();
      std::lock_guard lock(impl_.mu_);
      impl_.context_ = nullptr;
    }
    PublishSession(const PublishSession&) = delete;
    PublishSession& operator=(const PublishSession&) = delete;

    // Streams until the forwarder stops, the stream breaks or a write fails. True when the
    // broker acknowledged something (the connection was healthy).
    bool run() {
      {
        std::lock_guard lock(impl_.mu_);
        impl_.ended_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no stream");  // until one ends
      }
      if (!open()) return false;
      bool ok = stream_->Write(hello_message());
      impl_.wire_idle_.store(ok);
      reader_ = std::thread([this] { read_loop(); });
      while (ok) ok = send_round();
      finish();
      std::lock_guard lock(impl_.mu_);
      return progressed_;
    }

   private:
    struct InFlight {
      uint64_t sequence;
      uint32_t events;
    };

    // Channel, credentials and the stream; false when none could be opened (or stopping).
    bool open() {
      const ForwarderOptions& options = impl_.options_;
      std::shared_ptr<grpc::Channel> channel;
      try {
        channel = make_channel(address_, options.tls, options.compression == Compression::kGzip);
      } catch (const std::exception& e) {
        spdlog::error("forward: {}", e.what());
        return false;
      }
      stub_ = mcp::v1::Sampling::NewStub(channel);
      // Read again for each stream: a projected ServiceAccount token (per-node credentials,
      // --agent-token-review) is rotated by the kubelet. A file gone bad keeps the last token.
      if (!options.token_file.empty()) {
        try {
          impl_.token_ = read_token_file(options.token_file);
        } catch (const std::exception& e) {
          spdlog::warn("forward: {}; using the token read before", e.what());
        }
      }
      add_token(context_, impl_.token_);
      context_.AddMetadata("x-mcp-agent-id", options.agent_id);
      {
        std::lock_guard lock(impl_.mu_);
        if (impl_.stop_) return false;
        impl_.context_ = &context_;
      }
      stream_ = stub_->Publish(&context_);
      return true;
    }

    mcp::v1::AgentMessage hello_message() const {
      mcp::v1::AgentMessage msg;
      auto* hello = msg.mutable_hello();
      hello->set_agent_id(impl_.options_.agent_id);
      hello->set_hostname(host_name());  // the broker's OTLP host.name
      hello->set_version(MCP_VERSION);
      hello->add_capabilities("events-v2");
      hello->add_capabilities("refused-acks");
      hello->set_incarnation(impl_.log_.id());
      return msg;
    }

    // Under mu_: this stream's broker takes the refusals and has not heard the latest.
    bool status_due_locked() const { return accepts_status_ && impl_.refusals_dirty_; }

    // Sender thread, one turn: ships the open block when due, waits for work, then writes the
    // policy status and as many batches as the in-flight window has room for. False: the
    // stream is over (stopping, broken, or a write failed).
    bool send_round() {
      const size_t window = impl_.options_.max_in_flight;
      const auto due = impl_.ship_if_due();
      size_t room = 0;
      {
        std::unique_lock lock(impl_.mu_);
        impl_.scv_.wait_until(lock, due, [&] {
          return impl_.stop_ || broken_ || impl_.rearm_ || status_due_locked() ||
                 (in_flight_.size() < window && impl_.log_.last_offset() >= cursor_ && impl_.log_.last_offset() != 0);
        });
        impl_.rearm_ = false;
        if (impl_.stop_ || broken_) return false;
        room = window - std::min(window, in_flight_.size());
        if (status_due_locked()) {
          *msg_.mutable_policy_status() = impl_.refusals_;
          impl_.refusals_dirty_ = false;
        }
      }
      if (msg_.has_policy_status()) {
        if (!stream_->Write(msg_)) return false;
        msg_.Clear();
      }
      return room == 0 || send_batches(room);
    }

    // Sender thread: up to `room` spooled batches from cursor_ on. False: a write failed.
    bool send_batches(size_t room) {
      for (auto& record : impl_.log_.read_from(cursor_, room)) {
        auto* batch = msg_.mutable_batch();
        if (record.damaged || !batch->ParseFromString(record.payload)) {
          skip_unreadable(record);
          cursor_ = record.offset + 1;
          continue;
        }
        batch->set_sequence(record.offset);
        {
          std::lock_guard lock(impl_.mu_);
          in_flight_.push_back({record.offset, record.items});
          impl_.wire_idle_.store(false);
        }
        if (!stream_->Write(msg_)) return false;
        cursor_ = record.offset + 1;
        std::lock_guard lock(impl_.mu_);
        impl_.sent_ += record.items;
      }
      return true;
    }

    // Sender thread: a spooled batch that does not parse back is counted once per batch (a
    // replay meets it again), never silent, and released once everything before it is
    // acknowledged, so it never holds a flush.
    void skip_unreadable(const SegmentLog::Record& record) {
      bool flushed = false;
      {
        std::lock_guard lock(impl_.mu_);
        if (record.offset > impl_.unreadable_through_) {
          impl_.unreadable_through_ = record.offset;
          ++impl_.unreadable_batches_;
          impl_.unreadable_events_ += record.items;
          spdlog::error("forward: spooled batch {} cannot be read back; its {} events are lost", record.offset,
                        record.items);
        }
        if (in_flight_.empty()) {
          impl_.log_.release_through(record.offset);
          flushed = impl_.log_.last_offset() == 0;
        } else {
          skipped_through_ = record.offset;
        }
      }
      if (flushed) impl_.fcv_.notify_all();
    }

    // Reader thread: until the stream ends. Acks wake only who waits for them: flush() when
    // the spool empties, the sender when the in-flight window reopens, and a block held back
    // while a batch was in flight.
    void read_loop() {
      mcp::v1::BrokerMessage msg;
      while (stream_->Read(&msg)) {
        if (msg.broker_hlc() && impl_.options_.on_broker_hlc) impl_.options_.on_broker_hlc(msg.broker_hlc());
        if (msg.has_policies() && msg.policies().accepts_policy_status()) {
          {
            std::lock_guard lock(impl_.mu_);
            accepts_status_ = true;
            impl_.refusals_dirty_ = true;  // what this stream's broker has not heard yet
          }
          impl_.scv_.notify_all();
        }
        if (msg.has_ack()) {
          on_ack(msg.ack());
        } else if (msg.has_policies()) {
          on_policies(msg.policies());
        }
      }
      {
        std::lock_guard lock(impl_.mu_);
        broken_ = true;
      }
      impl_.scv_.notify_all();
    }

    // Reader thread: releases every batch up to the acknowledged one.
    void on_ack(const mcp::v1::Ack& ack) {
      const uint64_t seq = ack.sequence();
      bool reopened = false, idle_now = false, flushed = false;
      {
        // Under mu_ so flush() never sees the spool empty before acked_ counts the batch.
        std::lock_guard lock(impl_.mu_);
        impl_.log_.release_through(seq);
        const bool was_full = in_flight_.size() >= impl_.options_.max_in_flight;
        while (!in_flight_.empty() && in_flight_.front().sequence <= seq) {
          if (ack.refused() && in_flight_.front().sequence == seq) {
            // Malformed (a misread spool): lost and counted, and nothing waits behind it.
            ++impl_.unreadable_batches_;
            impl_.unreadable_events_ += in_flight_.front().events;
            spdlog::error("forward: the broker refused batch {} ({}); its {} events are lost", seq, ack.reason(),
                          in_flight_.front().events);
          } else {
            impl_.acked_ += in_flight_.front().events;
          }
          in_flight_.pop_front();
        }
        if (in_flight_.empty() && skipped_through_ > seq) impl_.log_.release_through(skipped_through_);
        reopened = was_full && in_flight_.size() < impl_.options_.max_in_flight;
        if (in_flight_.empty()) idle_now = !impl_.wire_idle_.exchange(true);
        flushed = impl_.log_.last_offset() == 0;
        progressed_ = true;
        impl_.connected_ = true;
      }
      if (flushed) impl_.fcv_.notify_all();
      if (reopened) impl_.scv_.notify_one();
      if (idle_now) impl_.ship_on_idle();
    }

    // Reader thread: a push of policies, to on_policy_set (a full set) or on_policy.
    void on_policies(const mcp::v1::PolicyPush& push) const {
      const ForwarderOptions& options = impl_.options_;
      std::vector<PolicyUpdate> updates;
      for (const auto& p : push.policies()) {
        PolicyUpdate u{p.service(), p.probe(), p.sampling_rate(), p.target_qps()};
        for (const auto& [key, value] : p.service_labels()) u.service_labels[key] = value;
        u.trace_id_prefix = p.trace_id_prefix();
        u.removed = p.sampling_rate() == 0 && p.target_qps() == 0;
        updates.push_back(std::move(u));
      }
      if (push.full_set() && options.on_policy_set) {
        std::erase_if(updates, [](const PolicyUpdate& u) { return u.removed; });
        options.on_policy_set(updates);
      } else if (options.on_policy) {
        for (const auto& u : updates) options.on_policy(u);
      }
    }

    // Sender thread: ends the stream and records how it ended.
    void finish() {
      // Cancelled only when stopping: a stream the broker ended keeps its status, so its reason
      // (a refusal) reaches the log instead of CANCELLED.
      if (impl_.stop_) context_.TryCancel();
      reader_.join();
      const grpc::Status status = stream_->Finish();
      std::lock_guard lock(impl_.mu_);
      impl_.context_ = nullptr;
      if (!impl_.stop_) {
        spdlog::warn("forward: stream to {} ended: {} ({})", address_, status.ok() ? "closed" : status.error_message(),
                     static_cast<int>(status.error_code()));
      }
      impl_.ended_ = status;  // send_loop weighs it with the error count, in one step
    }

    Impl& impl_;
    const std::string address_;
    grpc::ClientContext context_;
    std::unique_ptr<mcp::v1::Sampling::Stub> stub_;
    std::unique_ptr<grpc::ClientReaderWriter<mcp::v1::AgentMessage, mcp::v1::BrokerMessage>> stream_;
    std::deque<InFlight> in_flight_;  // guarded by impl_.mu_: written, not yet acknowledged
    bool accepts_status_ = false;     // guarded by impl_.mu_: this broker takes policy_status
    bool broken_ = false;             // guarded by impl_.mu_: the reader saw the stream end
    bool progressed_ = false;         // guarded by impl_.mu_: something was acknowledged
    uint64_t skipped_through_ = 0;    // guarded by impl_.mu_: last unreadable batch sent past
    uint64_t cursor_ = 0;             // sender: next sequence to send; 0: the first unacknowledged
    mcp::v1::AgentMessage msg_;       // sender: reused for each message written
    std::thread reader_;
  };

  bool run_stream(const std::string& address) { return PublishSession(*this, address).run(); }

  ForwarderOptions options_;
  std::string token_;
  SegmentLog log_;

  // The open block and what ships with it; taken by whichever thread ships (ship_locked).
  mutable std::mutex qmu_;
  EventBlockEncoder open_;                    // guarded by qmu_: the batch being filled
  std::vector<mcp::v1::ProbeCounts> counts_;  // guarded by qmu_
  mcp::v1::Batch batch_;                      // guarded by qmu_: reused for each shipped batch
  std::string record_;                        // guarded by qmu_: its serialized bytes
  uint64_t append_dropped_ = 0;               // guarded by qmu_: events of batches the spool refused
  BatchCloser closer_;                        // guarded by qmu_: when the open block closes

  mutable std::mutex mu_;
  std::condition_variable scv_;  // the sender: new batches, window reopened, rearm, stop, broken
  std::condition_variable fcv_;  // flush(): the spool emptied
  std::atomic<bool> stop_{false};
  bool rearm_ = false;  // guarded by mu_: a block started that the sender must time
  mcp::v1::PolicyStatus refusals_;  // guarded by mu_: the latest set_policy_refusals()
  std::string refused_;             // guarded by mu_: ForwarderStats::refused
  std::set<std::string> refused_by_;  // guarded by mu_: brokers whose last stream refused the credential
  grpc::Status ended_;                // guarded by mu_: how the last stream ended
  bool refusals_dirty_ = false;     // guarded by mu_: not sent on this stream yet
  // Connected with every sent batch acknowledged: the broker keeps up, so a small
  // batch now beats a full one later (Nagle's rule, the other way round).
  std::atomic<bool> wire_idle_{false};
  grpc::ClientContext* context_ = nullptr;
  uint64_t sent_ = 0;
  uint64_t acked_ = 0;
  uint64_t errors_ = 0;
  uint64_t reconnects_ = 0;
  uint64_t unreadable_batches_ = 0;
  uint64_t unreadable_events_ = 0;
  uint64_t unreadable_through_ = 0;  // highest unreadable offset counted
  std::atomic<bool> flush_failed_{false};  // the last flush timed out, nothing consumed since
  bool connected_ = false;
  std::string broker_;

  std::thread sender_;
};

Forwarder::Forwarder(ForwarderOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Forwarder::~Forwarder() {
  if (!impl_->flush_failed()) flush();
  impl_.reset();
}

void Forwarder::consume(const Event& event) { impl_->consume(event); }

void Forwarder::set_policy_refusals(std::vector<PolicyRefusal> refusals) { impl_->set_policy_refusals(std::move(refusals)); }

void Forwarder::poll_done() { impl_->poll_done(); }

void Forwarder::consume_counts(const std::vector<ProbeIntervalCounts>& counts) { impl_->consume_counts(counts); }

void Forwarder::flush() {
  flush_for(std::chrono::milliseconds(-1));
}

bool Forwarder::flush_for(std::chrono::milliseconds timeout) { return impl_->flush_for(timeout); }

bool Forwarder::drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (flush_for(std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(50)))) return true;
    if (left.count() <= 0 || (give_up && give_up()) || !refused().empty()) return false;
  }
}

Undelivered undelivered_of(const ForwarderStats& s) {
  Undelivered u;
  u.pending = s.queued + s.unacked;
  u.lost = s.dropped_oldest + s.unreadable_events;
  u.spool_dir = s.spool_dir;
  u.refused = s.refused;
  return u;
}

std::string Undelivered::describe() const {
  if (!any()) return {};
  std::string text = std::to_string(pending + lost) + " events undelivered" +
                     (refused.empty() ? std::string() : " (" + refused + ")") + ": ";
  if (pending && !spool_dir.empty()) {
    text += std::to_string(pending) + " kept in the spool " + spool_dir + " (a later run with it sends them)";
  } else if (pending) {
    text += std::to_string(pending) + " lost with the in-memory spool (no spool directory)";
  }
  if (lost) {
    if (pending) text += ", ";
    text += std::to_string(lost) + " lost during the run (full queue or spool, or unreadable batches)";
  }
  return text;
}

ForwarderStats Forwarder::stats() const { return impl_->stats(); }

std::string Forwarder::refused() const { return impl_->refused(); }

std::unique_ptr<Forwarder> make_forwarder(ForwarderOptions options) {
  return std::make_unique<Forwarder>(std::move(options));
}

}  // namespace mcp
