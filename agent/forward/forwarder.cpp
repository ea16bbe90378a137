#include "forward/forwarder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/utf8.h"
#include "forward/agent_id.h"
#include "forward/channel.h"
#include "forward/event_block.h"
#include "forward/segment_log.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp {
namespace {

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

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
  if (out.empty()) throw usage_error("--broker needs at least one HOST:PORT");
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
    if (options_.queue_capacity == 0) throw usage_error("forwarder: queue capacity must be > 0");
    if (options_.agent_id.empty()) options_.agent_id = unique_agent_id();
    options_.agent_id = valid_utf8(options_.agent_id);
    token_ = read_token_file(options_.token_file);
    batcher_ = std::thread([this] { batch_loop(); });
    sender_ = std::thread([this] { send_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      if (context_) context_->TryCancel();
    }
    { std::lock_guard lock(qmu_); }  // the batcher is either waiting or will see stop_
    qcv_.notify_all();
    scv_.notify_all();
    batcher_.join();
    sender_.join();
  }

  // Encodes the event straight into the open block (no per-event message or queue node);
  // a full block is closed into the queue of blocks waiting for the batcher.
  void consume(const Event& event) {
    flush_failed_.store(false, std::memory_order_relaxed);
    {
      std::lock_guard lock(qmu_);
      open_.add(event);
      const size_t n = open_.size();
      if (n == 1) oldest_ = std::chrono::steady_clock::now();
      const bool full = n >= block_limit();
      if (full) close_open_block();
      // Wake the batcher when a batch starts (it sleeps on an empty queue and must
      // start the age clock) and when one is full; in between it times out by itself.
      if (n != 1 && !full) return;
    }
    qcv_.notify_one();
  }

  size_t block_limit() const { return std::min(options_.batch_count, options_.queue_capacity); }

  // Under qmu_. Over queue_capacity the oldest closed block is dropped and counted.
  void close_open_block() {
    auto& b = closed_.emplace_back();
    b.events = static_cast<uint32_t>(open_.size());
    open_.finish(b.bytes);
    closed_events_ += b.events;
    while (closed_events_ > options_.queue_capacity && !closed_.empty()) {
      closed_events_ -= closed_.front().events;
      queue_dropped_ += closed_.front().events;
      closed_.pop_front();
    }
  }

  size_t queued_events() const { return closed_events_ + open_.size(); }

  void consume_counts(const std::vector<ProbeIntervalCounts>& counts) {
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
    }
    qcv_.notify_one();
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
    {
      std::unique_lock lock(qmu_);
      flushing_ = true;
      qcv_.notify_one();
      qcv_.wait_until(lock, deadline, [&] { return queued_events() == 0 && counts_.empty() && !batching_; });
      flushing_ = false;
      if (queued_events() != 0 || !counts_.empty() || batching_) return false;
    }
    std::unique_lock lock(mu_);
    return scv_.wait_until(lock, deadline, [&] { return log_.last_offset() == 0; });
  }

  ForwarderStats stats() const {
    ForwarderStats s;
    const SegmentLogStats log = log_.stats();
    {
      std::lock_guard lock(qmu_);
      s.queued = queued_events();
      s.dropped_oldest = queue_dropped_;
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
    return s;
  }

 private:
  // Closes batches by count or age and writes them ahead into the spool.
  void batch_loop() {
    ClosedBlock taken;
    std::vector<mcp::v1::ProbeCounts> counts;
    mcp::v1::Batch batch;
    std::string record;
    for (;;) {
      {
        std::unique_lock lock(qmu_);
        for (;;) {
          if (!closed_.empty() || (open_.size() > 0 && (stop_ || flushing_))) break;
          if (!counts_.empty()) break;  // about one a second: ship the counters at once
          if (stop_ && open_.size() == 0) return;
          if (open_.size() == 0) {
            qcv_.wait(lock);
            continue;
          }
          const auto due = oldest_ + (wire_idle_.load() ? options_.batch_linger : options_.batch_age);
          if (std::chrono::steady_clock::now() >= due) break;
          qcv_.wait_until(lock, due);
        }
        if (closed_.empty() && open_.size() > 0) close_open_block();
        taken.events = 0;
        taken.bytes.clear();
        if (!closed_.empty()) {
          taken = std::move(closed_.front());
          closed_.pop_front();
          closed_events_ -= taken.events;
        }
        counts.swap(counts_);
        oldest_ = std::chrono::steady_clock::now();
        batching_ = true;
      }
      // The spool holds the Batch with its events still encoded (Batch.events): the sender
      // ships it as stored, nothing is parsed back into per-event messages.
      batch.Clear();
      if (taken.events) batch.set_events(std::move(taken.bytes));
      for (auto& c : counts) *batch.add_counts() = std::move(c);
      counts.clear();
      batch.set_created_unix_ns(unix_ns());
      record.clear();
      batch.AppendToString(&record);
      try {
        log_.append(record, taken.events);
      } catch (const std::exception& e) {
        spdlog::error("forward: {}", e.what());
        std::lock_guard lock(qmu_);
        queue_dropped_ += taken.events;
      }
      {
        std::lock_guard lock(qmu_);
        batching_ = false;
      }
      qcv_.notify_all();
      // The sender checks the spool under mu_ before it sleeps: passing through mu_
      // here means it either sees this batch or is already waiting for the notify.
      { std::lock_guard lock(mu_); }
      scv_.notify_all();
    }
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
      }
      if (progressed) backoff = options_.backoff_initial;
      sleep_backoff(backoff);
      address = (address + 1) % options_.brokers.size();
    }
  }

  // One Publish stream: replays every unacknowledged batch in order, then follows the spool.
  // Returns true when the broker acknowledged something (the connection was healthy).
  bool run_stream(const std::string& address) {
    std::shared_ptr<grpc::Channel> channel;
    try {
      channel = make_channel(address, options_.tls, options_.compression == Compression::kGzip);
    } catch (const std::exception& e) {
      spdlog::error("forward: {}", e.what());
      return false;
    }
    auto stub = mcp::v1::Sampling::NewStub(channel);
    grpc::ClientContext context;
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
    bool broken = false;             // guarded by mu_
    bool progressed = false;         // guarded by mu_
    uint64_t skipped_through = 0;    // guarded by mu_: last unreadable batch sent past

    mcp::v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id(options_.agent_id);
    hello.mutable_hello()->set_hostname(host_name());  // the broker's OTLP host.name
    hello.mutable_hello()->set_version("0.1.0");
    hello.mutable_hello()->add_capabilities("events-v2");
    bool ok = stream->Write(hello);
    wire_idle_.store(ok);

    std::thread reader([&] {
      mcp::v1::BrokerMessage msg;
      while (stream->Read(&msg)) {
        if (msg.broker_hlc() && options_.on_broker_hlc) options_.on_broker_hlc(msg.broker_hlc());
        if (msg.has_ack()) {
          const uint64_t seq = msg.ack().sequence();
          // Under mu_ so flush() never sees the spool empty before acked_ counts the batch.
          std::lock_guard lock(mu_);
          log_.release_through(seq);
          while (!in_flight.empty() && in_flight.front().sequence <= seq) {
            acked_ += in_flight.front().events;
            in_flight.pop_front();
          }
          if (in_flight.empty() && skipped_through > seq) log_.release_through(skipped_through);
          if (in_flight.empty() && !wire_idle_.exchange(true)) {
            // The batcher may be waiting out batch_age: let it close the batch now.
            { std::lock_guard qlock(qmu_); }
            qcv_.notify_all();
          }
          progressed = true;
          connected_ = true;
        } else if (msg.has_policies() && options_.on_policy) {
          for (const auto& p : msg.policies().policies()) {
            PolicyUpdate u{p.service(), p.probe(), p.sampling_rate(), p.target_qps()};
            for (const auto& [key, value] : p.service_labels()) u.service_labels[key] = value;
            u.trace_id_prefix = p.trace_id_prefix();
            u.removed = p.sampling_rate() == 0 && p.target_qps() == 0;
            options_.on_policy(u);
          }
        }
        scv_.notify_all();
      }
      std::lock_guard lock(mu_);
      broken = true;
      scv_.notify_all();
    });

    uint64_t cursor = 0;  // next sequence to send; 0: the spool's first unacknowledged batch
    mcp::v1::AgentMessage msg;
    while (ok) {
      size_t room = 0;
      {
        std::unique_lock lock(mu_);
        scv_.wait_for(lock, std::chrono::milliseconds(50), [&] {
          return stop_ || broken ||
                 (in_flight.size() < options_.max_in_flight && log_.last_offset() >= cursor &&
                  log_.last_offset() != 0);
        });
        if (stop_ || broken) break;
        room = options_.max_in_flight - std::min(options_.max_in_flight, in_flight.size());
      }
      if (room == 0) continue;
      for (auto& record : log_.read_from(cursor, room)) {
        auto* batch = msg.mutable_batch();
        if (!batch->ParseFromString(record.payload)) {
          // Counted once per batch (a replay meets it again), never silent.
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
            scv_.notify_all();
          } else {
            skipped_through = record.offset;
          }
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
    context.TryCancel();
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
    }
    return progressed;
  }

  ForwarderOptions options_;
  std::string token_;
  SegmentLog log_;

  mutable std::mutex qmu_;
  std::condition_variable qcv_;
  struct ClosedBlock {
    std::string bytes;  // serialized EventBlock
    uint32_t events = 0;
  };
  EventBlockEncoder open_;               // guarded by qmu_: the batch being filled
  std::deque<ClosedBlock> closed_;       // guarded by qmu_: full, waiting for the batcher
  size_t closed_events_ = 0;
  std::vector<mcp::v1::ProbeCounts> counts_;  // guarded by qmu_
  std::chrono::steady_clock::time_point oldest_{};
  uint64_t queue_dropped_ = 0;
  bool batching_ = false;
  bool flushing_ = false;

  mutable std::mutex mu_;
  std::condition_variable scv_;
  std::atomic<bool> stop_{false};
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

  std::thread batcher_;
  std::thread sender_;
};

Forwarder::Forwarder(ForwarderOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Forwarder::~Forwarder() {
  if (!impl_->flush_failed()) flush();
  impl_.reset();
}

void Forwarder::consume(const Event& event) { impl_->consume(event); }

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
    if (left.count() <= 0 || (give_up && give_up())) return false;
  }
}

Undelivered undelivered_of(const ForwarderStats& s) {
  Undelivered u;
  u.pending = s.queued + s.unacked;
  u.lost = s.dropped_oldest + s.unreadable_events;
  u.spool_dir = s.spool_dir;
  return u;
}

std::string Undelivered::describe() const {
  if (!any()) return {};
  std::string text = std::to_string(pending + lost) + " events undelivered: ";
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

std::unique_ptr<Forwarder> make_forwarder(ForwarderOptions options) {
  return std::make_unique<Forwarder>(std::move(options));
}

}  // namespace mcp
