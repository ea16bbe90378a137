// SampleMetrics: per (service, probe) totals estimated from kept events' adjusted counts, as
// OTLP metrics, so a dashboard shows true call and error rates from 1% samples.
//
// Contract:
// - add_block() sums, per (service, probe), 1/p of every event (estimated calls), 1/p of those
//   whose return marks an error (marks_error: estimated errors) and the events themselves.
//   Thread-safe; called for every block the exporter is offered, before its queue bound, so the
//   metrics stay exact when spans or logs are dropped.
// - append_to() writes every series as cumulative monotonic Sums since construction:
//     mcp.calls.estimated   {call}   double   sum of adjusted counts
//     mcp.errors.estimated  {call}   double   sum of adjusted counts of failed calls
//     mcp.events.sampled    {event}  int      kept events received
//   one ResourceMetrics per service (resource service.name; "unknown_service" when empty),
//   points labelled mcp.probe. Rates are the backend's rate() over these counters.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "mcp/v1/sampling.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"

namespace mcp::otlp {

class SampleMetrics {
 public:
  explicit SampleMetrics(uint64_t start_unix_ns) : start_unix_ns_(start_unix_ns) {}

  void add_block(const mcp::v1::EventBlock& block);
  // Appends the totals as of `now_unix_ns`; false (nothing appended) before any event.
  bool append_to(opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest* out,
                 uint64_t now_unix_ns) const;

  struct Totals {
    double calls = 0;
    double errors = 0;
    uint64_t events = 0;
  };
  std::map<std::pair<std::string, std::string>, Totals> snapshot() const;

 private:
  const uint64_t start_unix_ns_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Totals> totals_;  // (service, probe)
};

}  // namespace mcp::otlp
