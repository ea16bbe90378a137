#include "broker/ingest/ingest_stats.h"

#include <cmath>

#include "broker/ingest/event_block.h"
#include "common/call_error.h"
#include "common/event.h"
#include "otlp/mapping.h"

namespace mcp::broker {
namespace {

// check_batch() refuses threshold 0, so the weight is finite.
double weight_of(const mcp::v1::Sample& s) { return 1.0 / threshold_to_probability(s.threshold()); }

// The agents' per-interval kernel counters in a packet, summed into per-probe totals.
void add_interval_counts(const mcp::v1::SamplePacket& packet, ProbeTotals& totals) {
  for (const auto& pc : packet.counts()) {
    if (!std::isfinite(pc.estimate()) || pc.estimate() < 0) continue;  // not a count: ignored
    ProbeCount& c = totals[{pc.service(), pc.probe()}];
    c.seen += pc.seen();
    c.corrected += pc.estimate();
  }
}

const std::pair<std::string, std::string> kOtherProbes{"_other", "_other"};

}  // namespace

ProbeTotals IngestStats::count(const mcp::v1::SamplePacket& stored, const mcp::v1::EventBlock* block) {
  ProbeTotals totals;
  if (block != nullptr) {
    std::map<std::pair<uint32_t, uint32_t>, ProbeCount> by_index;
    for (const auto& e : block->events()) {
      ProbeCount& c = by_index[{e.service(), e.probe()}];
      ++c.events;
      const double w = 1.0 / threshold_to_probability(e.threshold());  // checked: non-zero
      c.adjusted += w;
      if (otlp::marks_error(e)) c.errors += w;
    }
    for (const auto& [key, c] : by_index) {
      ProbeCount& total = totals[{block_string(*block, key.first), block_string(*block, key.second)}];
      total.events += c.events;
      total.adjusted += c.adjusted;
      total.errors += c.errors;
    }
  }
  for (const auto& s : stored.samples()) {
    ProbeCount& c = totals[{s.service(), s.probe()}];
    ++c.events;
    c.adjusted += weight_of(s);
    if (mcp::marks_error(s.kind() == "cuda" ? EventKind::kCuda : EventKind::kSyscall, s.has_ret(), s.ret()))
      c.errors += weight_of(s);
  }
  add_interval_counts(stored, totals);
  return totals;
}

void IngestStats::stored(const ProbeTotals& counts) {
  std::lock_guard lock(mu_);
  ++batches_;
  for (const auto& [key, c] : counts) {
    auto it = probes_.find(key);
    if (it == probes_.end()) {
      if (probes_.size() < max_probe_series_) {
        it = probes_.emplace(key, ProbeCount{}).first;
      } else {
        it = probes_.try_emplace(kOtherProbes).first;
        overflow_ += c.events;
      }
    }
    ProbeCount& total = it->second;
    total.events += c.events;
    total.adjusted += c.adjusted;
    total.errors += c.errors;
    total.seen += c.seen;
    total.corrected += c.corrected;
  }
}

void IngestStats::duplicate() {
  std::lock_guard lock(mu_);
  ++duplicates_;
}

void IngestStats::fill(mcp::v1::StatsReply* reply) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, count] : probes_) {
    auto* p = reply->add_probes();
    p->set_service(key.first);
    p->set_probe(key.second);
    p->set_events(count.events);
    p->set_adjusted_count(count.adjusted);
    p->set_seen(count.seen);
    p->set_corrected_count(count.corrected);
    p->set_error_adjusted_count(count.errors);
  }
  reply->set_probe_series_overflow(overflow_);
  reply->set_batches(batches_);
  reply->set_duplicate_batches(duplicates_);
  reply->set_refused_publishes(refused_.load(std::memory_order_relaxed));
}

}  // namespace mcp::broker
