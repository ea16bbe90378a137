#include "forward/forwarder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/setting_names.h"
#include "common/utf8.h"
#include "forward/agent_id.h"
#include "forward/channel.h"
#include "forward/event_block.h"
#include "spool/segment_log.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp {
namespace {

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

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
                               options_.spool_max_bytes}) {
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
    bool shipped = false, started = false;
    {
      std::lock_guard lock(qmu_);
      open_.add(event);
      const size_t n = open_.size();
      if (n == 1) oldest_ = std::chrono::steady_clock::now();
      if (n >= options_.batch_count) shipped = ship_locked();
      else started = n == 1 && !driven_;
    }
    if (shipped) wake_sender();
    else if (started) rearm_sender();  // only callers without poll_done(): the sender times the block
  }

  // The caller's burst is over (the runtime calls this after each ring poll): while the broker
  // has acknowledged everything, the open block goes now (under heavy traffic, once batch_gap
  // has passed since the last batch: the sender times it); otherwise at batch_age, at
  // batch_count, or on the ack that leaves nothing in flight (the reader ships it then).
  void poll_done() {
    bool shipped = false, timed = false;
    {
      std::lock_guard lock(qmu_);
      driven_ = true;
      if (open_.size() == 0) return;
      const auto now = std::chrono::steady_clock::now();
      if (wire_idle_.load()) ship_or_time_locked(now, &shipped, &timed);
      else if (now >= oldest_ + options_.batch_age) shipped = ship_locked();
    }
    if (shipped) wake_sender();
    else if (timed) rearm_sender();
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
    last_ship_ = std::chrono::steady_clock::now();
    last_events_ = events;
    gap_timed_ = false;
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

  // Under qmu_, wire idle: batches are heavy (the last one held batch_burst events or more)
  // and the previous went out less than batch_gap ago. Waiting then costs a little latency at
  // a rate where batches are plentiful and saves the broker a batch's fixed cost (bench/RESULTS.md).
  bool in_gap_locked(std::chrono::steady_clock::time_point now) const {
    return heavy_locked() && now < last_ship_ + options_.batch_gap;
  }
  // Under qmu_: heavy traffic, the last batch held batch_burst events or more.
  bool heavy_locked() const { return last_events_ >= options_.batch_burst; }
  // Under qmu_, wire idle, open block not empty: ships it, or has the sender ship it when the
  // gap ends (*timed: the caller calls rearm_sender(), once per block).
  void ship_or_time_locked(std::chrono::steady_clock::time_point now, bool* shipped, bool* timed) {
    if (!in_gap_locked(now)) {
      *shipped = ship_locked();
    } else if (!gap_timed_) {
      gap_timed_ = *timed = true;
    }
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

  // Sender thread: ships the open block once it is due by age (batch_linger while the wire is
  // idle and no poll_done() caller ends bursts, else batch_age) or, on an idle wire under heavy
  // traffic, at the end of batch_gap; returns when to look again.
  std::chrono::steady_clock::time_point ship_if_due() {
    const auto now = std::chrono::steady_clock::now();
    auto next = now + std::chrono::milliseconds(50);
    std::lock_guard lock(qmu_);
    if (open_.size() == 0) return next;
    const bool idle = wire_idle_.load();
    auto due = oldest_ + (idle && !driven_ ? options_.batch_linger : options_.batch_age);
    if (idle && heavy_locked())  // at the gap's end
      due = std::min(oldest_ + options_.batch_age,
                     std::max(driven_ ? oldest_ : due, last_ship_ + options_.batch_gap));
    if (now < due) return std::min(next, due);
    ship_locked();  // the caller is the sender: no wake-up needed
    return next;
  }

  // Reader thread: nothing is in flight any more. What waited for that goes now.
  void ship_on_idle() {
    bool shipped = false, timed = false;
    {
      std::lock_guard lock(qmu_);
      if (open_.size() > 0) ship_or_time_locked(std::chrono::steady_clock::now(), &shipped, &timed);
    }
    if (shipped) wake_sender();
    else if (timed) rearm_sender();
  }

  void sleep_backoff(std::chrono::milliseconds& backoff) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    // Full jitter: anywhere in [backoff/2, backoff], so restarted agents do not reconnect in step.
    std::uniform_int_distribution<int64_t> pick(backoff.count() / 2, backoff.count());
    const auto wait = std::chrono::milliseconds(pick(rng));
    std::unique_lock lock(mu_);
    scv_.wait_for(lock, wait, [&] { return stop_.load(); });
    backoff = std::min(backoff * 2, options_.backoff_max);
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
    size_t address = 0;
    auto backoff = options_.backoff_initial;
    bool first = true;
    for (;;) {
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
      if (progressed) backoff = options_.backoff_initial;
      sleep_backoff(backoff);
      address = (address + 1) % options_.brokers.size();
    }
  }

  // One Publish stream: replays every unacknowledged batch in order, then follows the spool.
  // Returns true when the broker acknowledged something (the connection was healthy).
  bool run_stream(const std::string& address) {
    {
      std::lock_guard lock(mu_);
      ended_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no stream");  // until one ends
    }
    std::shared_ptr<grpc::Channel> channel;
    try {
      channel = make_channel(address, options_.tls, options_.compression == Compression::kGzip);
    } catch (const std::exception& e) {
      spdlog::error("forward: {}", e.what());
      return false;
    }
    auto stub = mcp::v1::Sampling::NewStub(channel);
    grpc::ClientContext context;
    // Read again for each stream: a projected ServiceAccount token (per-node credentials,
    // --agent-token-review) is rotated by the kubelet. A file gone bad keeps the last token.
    if (!options_.token_file.empty()) {
      try {
        token_ = read_token_file(options_.token_file);
      } catch (const std::exception& e) {
        spdlog::warn("forward: {}; using the token read before", e.what());
      }
    }
    add_token(context, token_);
    context.AddMetadata("x-mcp-agent-id", options_.agent_id);
    {
      std::lock_guard lock(mu_);
      if (stop_) return false;
      context_ = &context;
    }
    auto stream = stub->Publish(&context);

    struct InFlight {
      uint64_t sequence;
      uint32_t events;
    };
    std::deque<InFlight> in_flight;  // guarded by mu_
    bool accepts_status = false;     // guarded by mu_: this stream's broker takes policy_status
    bool broken = false;             // guarded by mu_
    bool progressed = false;         // guarded by mu_
    uint64_t skipped_through = 0;    // guarded by mu_: last unreadable batch sent past

    mcp::v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id(options_.agent_id);
    hello.mutable_hello()->set_hostname(host_name());  // the broker's OTLP host.name
    hello.mutable_hello()->set_version("0.1.0");
    hello.mutable_hello()->add_capabilities("events-v2");
    hello.mutable_hello()->add_capabilities("refused-acks");
    hello.mutable_hello()->set_incarnation(log_.id());
    bool ok = stream->Write(hello);
    wire_idle_.store(ok);

    // Acks wake only who waits for them: flush() when the spool empties, the sender when the
    // in-flight window reopens, and a block held back while a batch was in flight.
    std::thread reader([&] {
      mcp::v1::BrokerMessage msg;
      while (stream->Read(&msg)) {
        if (msg.broker_hlc() && options_.on_broker_hlc) options_.on_broker_hlc(msg.broker_hlc());
        if (msg.has_policies() && msg.policies().accepts_policy_status()) {
          {
            std::lock_guard lock(mu_);
            accepts_status = true;
            refusals_dirty_ = true;  // what this stream's broker has not heard yet
          }
          scv_.notify_all();
        }
        if (msg.has_ack()) {
          const uint64_t seq = msg.ack().sequence();
          bool reopened = false, idle_now = false, flushed = false;
          {
            // Under mu_ so flush() never sees the spool empty before acked_ counts the batch.
            std::lock_guard lock(mu_);
            log_.release_through(seq);
            const bool was_full = in_flight.size() >= options_.max_in_flight;
            while (!in_flight.empty() && in_flight.front().sequence <= seq) {
              if (msg.ack().refused() && in_flight.front().sequence == seq) {
                // Malformed (a misread spool): lost and counted, and nothing waits behind it.
                ++unreadable_batches_;
                unreadable_events_ += in_flight.front().events;
                spdlog::error("forward: the broker refused batch {} ({}); its {} events are lost", seq,
                              msg.ack().reason(), in_flight.front().events);
              } else {
                acked_ += in_flight.front().events;
              }
              in_flight.pop_front();
            }
            if (in_flight.empty() && skipped_through > seq) log_.release_through(skipped_through);
            reopened = was_full && in_flight.size() < options_.max_in_flight;
            if (in_flight.empty()) idle_now = !wire_idle_.exchange(true);
            flushed = log_.last_offset() == 0;
            progressed = true;
            connected_ = true;
          }
          if (flushed) fcv_.notify_all();
          if (reopened) scv_.notify_one();
          if (idle_now) ship_on_idle();
        } else if (msg.has_policies()) {
          std::vector<PolicyUpdate> updates;
          for (const auto& p : msg.policies().policies()) {
            PolicyUpdate u{p.service(), p.probe(), p.sampling_rate(), p.target_qps()};
            for (const auto& [key, value] : p.service_labels()) u.service_labels[key] = value;
            u.trace_id_prefix = p.trace_id_prefix();
            u.removed = p.sampling_rate() == 0 && p.target_qps() == 0;
            updates.push_back(std::move(u));
          }
          if (msg.policies().full_set() && options_.on_policy_set) {
            std::erase_if(updates, [](const PolicyUpdate& u) { return u.removed; });
            options_.on_policy_set(updates);
          } else if (options_.on_policy) {
            for (const auto& u : updates) options_.on_policy(u);
          }
        }
      }
      {
        std::lock_guard lock(mu_);
        broken = true;
      }
      scv_.notify_all();
    });

    uint64_t cursor = 0;  // next sequence to send; 0: the spool's first unacknowledged batch
    mcp::v1::AgentMessage msg;
    while (ok) {
      const auto due = ship_if_due();
      size_t room = 0;
      {
        std::unique_lock lock(mu_);
        scv_.wait_until(lock, due, [&] {
          return stop_ || broken || rearm_ || (accepts_status && refusals_dirty_) ||
                 (in_flight.size() < options_.max_in_flight && log_.last_offset() >= cursor &&
                  log_.last_offset() != 0);
        });
        rearm_ = false;
        if (stop_ || broken) break;
        room = options_.max_in_flight - std::min(options_.max_in_flight, in_flight.size());
        if (accepts_status && refusals_dirty_) {
          *msg.mutable_policy_status() = refusals_;
          refusals_dirty_ = false;
        }
      }
      if (msg.has_policy_status()) {
        if (!stream->Write(msg)) {
          ok = false;
          break;
        }
        msg.Clear();
      }
      if (room == 0) continue;
      for (auto& record : log_.read_from(cursor, room)) {
        auto* batch = msg.mutable_batch();
        if (record.damaged || !batch->ParseFromString(record.payload)) {
          // Counted once per batch (a replay meets it again), never silent.
          bool flushed = false;
          {
            std::lock_guard lock(mu_);
            if (record.offset > unreadable_through_) {
              unreadable_through_ = record.offset;
              ++unreadable_batches_;
              unreadable_events_ += record.items;
              spdlog::error("forward: spooled batch {} cannot be read back; its {} events are lost", record.offset,
                            record.items);
            }
            // Release it once everything before it is acknowledged, so it never holds a flush.
            if (in_flight.empty()) {
              log_.release_through(record.offset);
              flushed = log_.last_offset() == 0;
            } else {
              skipped_through = record.offset;
            }
          }
          if (flushed) fcv_.notify_all();
          cursor = record.offset + 1;
          continue;
        }
        batch->set_sequence(record.offset);
        {
          std::lock_guard lock(mu_);
          in_flight.push_back({record.offset, record.items});
          wire_idle_.store(false);
        }
        if (!stream->Write(msg)) {
          ok = false;
          break;
        }
        cursor = record.offset + 1;
        std::lock_guard lock(mu_);
        sent_ += record.items;
      }
    }
    // Cancelled only when stopping: a stream the broker ended keeps its status, so its reason
    // (a refusal) reaches the log instead of CANCELLED.
    if (stop_) context.TryCancel();
    reader.join();
    const grpc::Status status = stream->Finish();
    {
      std::lock_guard lock(mu_);
      context_ = nullptr;
      if (!stop_) {
        spdlog::warn("forward: stream to {} ended: {} ({})", address,
                     status.ok() ? "closed" : status.error_message(),
                     static_cast<int>(status.error_code()));
      }
      ended_ = status;  // send_loop weighs it with the error count, in one step
    }
    return progressed;
  }

  ForwarderOptions options_;
  std::string token_;
  SegmentLog log_;

  // The open block and what ships with it; taken by whichever thread ships (ship_locked).
  mutable std::mutex qmu_;
  EventBlockEncoder open_;                    // guarded by qmu_: the batch being filled
  std::vector<mcp::v1::ProbeCounts> counts_;  // guarded by qmu_
  std::chrono::steady_clock::time_point oldest_{};  // guarded by qmu_: the open block's first event
  mcp::v1::Batch batch_;                      // guarded by qmu_: reused for each shipped batch
  std::string record_;                        // guarded by qmu_: its serialized bytes
  uint64_t append_dropped_ = 0;               // guarded by qmu_: events of batches the spool refused
  bool driven_ = false;                       // guarded by qmu_: someone calls poll_done()
  std::chrono::steady_clock::time_point last_ship_{};  // guarded by qmu_: the last batch closed
  uint32_t last_events_ = 0;                  // guarded by qmu_: and its events
  bool gap_timed_ = false;                    // guarded by qmu_: the sender ships the block at the gap's end

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
