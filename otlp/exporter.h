// Exporter: ships kept events to an OpenTelemetry collector over OTLP/gRPC (traces, logs and,
// from SampleMetrics, metrics), off the caller's thread.
//
// Contract:
// - offer() never blocks and never waits on the network: it adds the block to the metrics
//   totals, then queues it, or drops it (counted in `dropped`) when the queue already holds
//   queue_events events. A collector that is down or hangs therefore costs the caller one
//   mutex and a counter, never a stall.
// - One thread sends: a batch goes out once it holds batch_events events or its oldest event
//   waited batch_interval. A retryable answer (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED,
//   ABORTED, OUT_OF_RANGE, DATA_LOSS, RESOURCE_EXHAUSTED) is retried with exponential backoff
//   (common/backoff.h: equal jitter, initial_backoff doubling up to max_backoff, at most
//   max_attempts calls); any other answer,
//   or the last attempt failing, counts the batch's events as `failed`. Each call has `timeout`.
// - Every metrics_interval (0: never) the SampleMetrics totals are exported (cumulative Sums).
// - TLS unless `insecure`; `ca_file` replaces the system's roots. `headers` go on every call
//   as gRPC metadata (e.g. "authorization" = "Bearer ..."); keys are lower-cased.
// - Counters are plain atomics read through stats(); exported + failed + dropped + queued +
//   in flight == events offered.
// - shutdown(grace) sends what is queued until `grace` runs out (cancelling a call in flight
//   then), counts the rest as dropped, and joins the thread. The destructor is shutdown(0).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mcp/v1/sampling.pb.h"
#include "otlp/exporter_options.h"
#include "otlp/mapping.h"
#include "otlp/sample_metrics.h"

namespace mcp::otlp {

struct ExporterStats {
  uint64_t exported = 0;         // events (spans + log records) the collector accepted
  uint64_t failed = 0;           // events given up on (non-retryable answer, attempts used up)
  uint64_t dropped = 0;          // events refused: queue full, or left over at shutdown
  uint64_t retries = 0;          // Export calls repeated after a retryable answer
  uint64_t queued = 0;           // events waiting now
  uint64_t metric_exports = 0;   // metrics requests the collector accepted
  uint64_t metric_failures = 0;  // metrics requests given up on (the next one resends totals)
};

class Exporter {
 public:
  // Throws mcp::Error (usage): no endpoint, an unreadable CA file, a bad header.
  explicit Exporter(ExporterOptions options);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // False when dropped (queue full or shutting down). `block` must not change afterwards.
  bool offer(std::shared_ptr<const mcp::v1::EventBlock> block, const Origin& origin);
  // An audit record (mapping.h append_audit): one event in every count above, never blocks.
  bool offer_audit(AuditEntry entry, const Origin& origin);
  ExporterStats stats() const;
  const SampleMetrics& metrics() const;
  void shutdown(std::chrono::milliseconds grace);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcp::otlp
