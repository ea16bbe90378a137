#include "otlp/exporter.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "clock/unix_time.h"
#include "common/backoff.h"
#include "common/error.h"
#include "common/text_file.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.grpc.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.grpc.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"

namespace mcp::otlp {
namespace {

namespace collector_trace = opentelemetry::proto::collector::trace::v1;
namespace collector_logs = opentelemetry::proto::collector::logs::v1;
namespace collector_metrics = opentelemetry::proto::collector::metrics::v1;
using Clock = std::chrono::steady_clock;

using clock::unix_ns;

// The OTLP specification's retryable gRPC codes (RESOURCE_EXHAUSTED: the collector asks us
// to slow down).
bool retryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DATA_LOSS:
      return true;
    default:
      return false;
  }
}

struct Item {
  std::shared_ptr<const mcp::v1::EventBlock> block;  // else `audit`
  std::shared_ptr<const AuditEntry> audit;
  Origin origin;
  uint64_t events = 0;
  Clock::time_point queued_at;
};

}  // namespace

class Exporter::Impl {
 public:
  explicit Impl(ExporterOptions options)
      : options_(std::move(options)), metrics_(unix_ns()) {
    if (options_.endpoint.empty()) throw usage_error("OTLP export needs an endpoint (HOST:PORT)");
    if (options_.batch_events == 0 || options_.queue_events == 0 || options_.max_attempts < 1)
      throw usage_error("OTLP batch, queue and attempts must be positive");
    for (auto& [k, v] : options_.headers) k = parse_header(k + "=" + v).first;
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (options_.insecure) {
      creds = grpc::InsecureChannelCredentials();
    } else {
      grpc::SslCredentialsOptions ssl;
      if (!options_.ca_file.empty()) ssl.pem_root_certs = read_text_file(options_.ca_file, "OTLP CA file");
      creds = grpc::SslCredentials(ssl);
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    auto channel = grpc::CreateCustomChannel(options_.endpoint, creds, args);
    traces_ = collector_trace::TraceService::NewStub(channel);
    logs_ = collector_logs::LogsService::NewStub(channel);
    metrics_stub_ = collector_metrics::MetricsService::NewStub(channel);
    next_metrics_ = Clock::now() + options_.metrics_interval;
    worker_ = std::thread([this] { run(); });
  }

  ~Impl() { shutdown(std::chrono::milliseconds(0)); }

  bool offer(std::shared_ptr<const mcp::v1::EventBlock> block, const Origin& origin) {
    if (!block) return true;
    metrics_.add_block(*block);
    const uint64_t events = static_cast<uint64_t>(block->events_size());
    if (events == 0) return true;
    return enqueue(Item{std::move(block), nullptr, origin, events, Clock::now()});
  }

  bool offer_audit(AuditEntry entry, const Origin& origin) {
    return enqueue(Item{nullptr, std::make_shared<const AuditEntry>(std::move(entry)), origin, 1, Clock::now()});
  }

  bool enqueue(Item item) {
    const uint64_t events = item.events;
    std::lock_guard lock(mu_);
    if (stopping_ || queued_ + events > options_.queue_events) {
      dropped_.fetch_add(events, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(std::move(item));
    queued_ += events;
    if (queued_ >= options_.batch_events) cv_.notify_all();
    else if (queue_.size() == 1) cv_.notify_all();  // starts the batch_interval clock
    return true;
  }

  ExporterStats stats() const {
    ExporterStats s;
    s.exported = exported_.load(std::memory_order_relaxed);
    s.failed = failed_.load(std::memory_order_relaxed);
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.retries = retries_.load(std::memory_order_relaxed);
    s.metric_exports = metric_exports_.load(std::memory_order_relaxed);
    s.metric_failures = metric_failures_.load(std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    s.queued = queued_;
    return s;
  }

  const SampleMetrics& metrics() const { return metrics_; }

  void shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        stopping_ = true;
        stop_deadline_ = Clock::now() + grace;
      }
      cv_.notify_all();
      if (in_flight_ != nullptr && grace.count() == 0) in_flight_->TryCancel();
    }
    // A call in flight past the deadline is cancelled by a watcher, so join is bounded.
    std::thread watcher;
    if (grace.count() > 0) {
      watcher = std::thread([this] {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, stop_deadline_, [&] { return finished_; });
        if (!finished_ && in_flight_ != nullptr) in_flight_->TryCancel();
      });
    }
    if (worker_.joinable()) worker_.join();
    {
      std::lock_guard lock(mu_);
      finished_ = true;
      cv_.notify_all();
    }
    if (watcher.joinable()) watcher.join();
  }

 private:
  bool past_stop_deadline() const { return stopping_ && Clock::now() >= stop_deadline_; }

  void run() {
    std::unique_lock lock(mu_);
    const bool metrics_on = options_.metrics_interval.count() > 0;
    for (;;) {
      // Recomputed after every wake-up: an offer() into an empty queue starts a new clock.
      const auto now = Clock::now();
      const bool batch_due =
          !queue_.empty() && (stopping_ || queued_ >= options_.batch_events ||
                              now >= queue_.front().queued_at + options_.batch_interval);
      const bool metrics_due = metrics_on && now >= next_metrics_;
      if (stopping_ && (queue_.empty() || past_stop_deadline())) break;
      if (!batch_due && !metrics_due) {
        auto wake = metrics_on ? next_metrics_ : now + std::chrono::hours(1);
        if (!queue_.empty()) wake = std::min(wake, queue_.front().queued_at + options_.batch_interval);
        cv_.wait_until(lock, wake);
        continue;
      }
      std::vector<Item> batch;
      uint64_t events = 0;
      while (batch_due && !queue_.empty() &&
             (batch.empty() || events + queue_.front().events <= options_.batch_events)) {
        events += queue_.front().events;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_ -= events;
      lock.unlock();
      if (!batch.empty()) send_batch(batch, events);
      if (metrics_on && Clock::now() >= next_metrics_) {
        send_metrics();
        next_metrics_ = Clock::now() + options_.metrics_interval;
      }
      lock.lock();
    }
    // Left over at shutdown: dropped, counted.
    for (const auto& item : queue_) dropped_.fetch_add(item.events, std::memory_order_relaxed);
    queue_.clear();
    queued_ = 0;
    const bool final_metrics = metrics_on && !past_stop_deadline();
    lock.unlock();
    if (final_metrics) send_metrics();  // the totals as of shutdown
  }

  void send_batch(const std::vector<Item>& batch, uint64_t events) {
    requests_.clear();
    for (const auto& item : batch) {
      if (item.block) append_block(*item.block, item.origin, &requests_);
      else append_audit(*item.audit, item.origin, &requests_);
    }
    bool ok = true;
    if (requests_.spans > 0) {
      collector_trace::ExportTraceServiceResponse reply;
      ok = call("traces", [&](grpc::ClientContext* ctx) { return traces_->Export(ctx, requests_.traces, &reply); });
    }
    if (ok && requests_.log_records > 0) {
      collector_logs::ExportLogsServiceResponse reply;
      ok = call("logs", [&](grpc::ClientContext* ctx) { return logs_->Export(ctx, requests_.logs, &reply); });
    }
    // Spans already accepted when the logs fail are counted as failed too: the counters are
    // per event offered, and a retry of the pair would duplicate the spans.
    (ok ? exported_ : failed_).fetch_add(events, std::memory_order_relaxed);
  }

  void send_metrics() {
    collector_metrics::ExportMetricsServiceRequest request;
    if (!metrics_.append_to(&request, unix_ns())) return;
    collector_metrics::ExportMetricsServiceResponse reply;
    const bool ok = call("metrics", [&](grpc::ClientContext* ctx) {
      return metrics_stub_->Export(ctx, request, &reply);
    });
    (ok ? metric_exports_ : metric_failures_).fetch_add(1, std::memory_order_relaxed);
  }

  // One Export with retries; true when the collector accepted it.
  template <typename Rpc>
  bool call(const char* what, Rpc rpc) {
    Backoff backoff(options_.initial_backoff, options_.max_backoff);  // one endpoint
    for (int attempt = 1;; ++attempt) {
      grpc::ClientContext ctx;
      for (const auto& [k, v] : options_.headers) ctx.AddMetadata(k, v);
      auto deadline = Clock::now() + options_.timeout;
      {
        std::lock_guard lock(mu_);
        if (stopping_) deadline = std::min(deadline, stop_deadline_);
        if (past_stop_deadline()) return false;
        in_flight_ = &ctx;
      }
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           deadline - Clock::now()));
      const grpc::Status status = rpc(&ctx);
      {
        std::lock_guard lock(mu_);
        in_flight_ = nullptr;
      }
      if (status.ok()) return true;
      if (!retryable(status.error_code()) || attempt >= options_.max_attempts) {
        spdlog::warn("OTLP {} export to {} failed after {} attempt(s): {} ({})", what,
                     options_.endpoint, attempt, status.error_message(),
                     static_cast<int>(status.error_code()));
        return false;
      }
      std::unique_lock lock(mu_);
      const auto until = Clock::now() + backoff.failed();
      // A shutdown cuts the wait short only when its grace is over.
      cv_.wait_until(lock, until, [&] { return past_stop_deadline(); });
      if (past_stop_deadline()) return false;
      lock.unlock();
      retries_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  ExporterOptions options_;
  SampleMetrics metrics_;
  std::unique_ptr<collector_trace::TraceService::Stub> traces_;
  std::unique_ptr<collector_logs::LogsService::Stub> logs_;
  std::unique_ptr<collector_metrics::MetricsService::Stub> metrics_stub_;
  Requests requests_;  // the worker's, reused

  mutable std::mutex mu_;  // guards the queue and the shutdown state
  std::condition_variable cv_;
  std::deque<Item> queue_;
  uint64_t queued_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  Clock::time_point stop_deadline_{};
  Clock::time_point next_metrics_{};
  grpc::ClientContext* in_flight_ = nullptr;

  std::atomic<uint64_t> exported_{0}, failed_{0}, dropped_{0}, retries_{0};
  std::atomic<uint64_t> metric_exports_{0}, metric_failures_{0};
  std::thread worker_;
};

Exporter::Exporter(ExporterOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Exporter::~Exporter() = default;
bool Exporter::offer(std::shared_ptr<const mcp::v1::EventBlock> block, const Origin& origin) {
  return impl_->offer(std::move(block), origin);
}

bool Exporter::offer_audit(AuditEntry entry, const Origin& origin) {
  return impl_->offer_audit(std::move(entry), origin);
}
ExporterStats Exporter::stats() const { return impl_->stats(); }
const SampleMetrics& Exporter::metrics() const { return impl_->metrics(); }
void Exporter::shutdown(std::chrono::milliseconds grace) { impl_->shutdown(grace); }

}  // namespace mcp::otlp
