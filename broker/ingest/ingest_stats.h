// IngestStats: what the broker stored, per (service, probe), for the Stats RPC and /metrics.
// Agents name services and probes, so the number of distinct pairs is bounded: a pair past
// max_probe_series is counted under ("_other", "_other") and its events in probe_series_overflow.
// count() reads a batch (compact block or v1 samples, plus the agents' interval counters) into
// totals without locking, so the caller may count before it stores; stored() adds them once the
// batch is stored. Thread-safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

struct ProbeCount {
  uint64_t events = 0;
  double adjusted = 0;
  double errors = 0;  // adjusted count of the events whose call failed (marks_error)
  uint64_t seen = 0;  // from the agents' ProbeCounts
  double corrected = 0;
};

using ProbeTotals = std::map<std::pair<std::string, std::string>, ProbeCount>;

class IngestStats {
 public:
  explicit IngestStats(size_t max_probe_series) : max_probe_series_(max_probe_series) {}

  // A batch's events and interval counters; a block is counted per (service, probe) dictionary
  // index first, its strings looked up once each.
  static ProbeTotals count(const mcp::v1::SamplePacket& stored, const mcp::v1::EventBlock* block);

  void stored(const ProbeTotals& counts);
  void duplicate();
  void refused() { refused_.fetch_add(1, std::memory_order_relaxed); }

  // Sets probes, probe_series_overflow, batches, duplicate_batches and refused_publishes.
  void fill(mcp::v1::StatsReply* reply) const;

 private:
  const size_t max_probe_series_;
  mutable std::mutex mu_;  // guards everything below but refused_
  ProbeTotals probes_;
  uint64_t overflow_ = 0;  // events counted under the "_other" pair
  uint64_t batches_ = 0;
  uint64_t duplicates_ = 0;
  std::atomic<uint64_t> refused_{0};
};

}  // namespace mcp::broker
