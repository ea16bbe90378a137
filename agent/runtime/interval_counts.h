// IntervalCounts: per probe, the events delivered to the sinks, the corrected
// estimate (EST_COUNT) and, every interval, what changed since the last one: the
// ProbeCounts that `trace` and `run` both ship to the broker beside the events.
// Consumer thread only (on_delivered and close are called from the poll loop).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/event.h"
#include "control/estimate_corrector.h"
#include "forward/forwarder.h"
#include "loader/kernel_maps.h"

namespace mcp::runtime {

class IntervalCounts {
 public:
  explicit IntervalCounts(size_t max_probes);
  void on_delivered(const Event& e);
  // Closes an interval for every probe from one batch read of the kernel counters:
  // corrects the estimates and returns, for the non-internal probes that saw,
  // delivered or orphaned something, the interval's counts labelled service_of(id).
  std::vector<ProbeIntervalCounts> close(const loader::KernelMaps& maps,
                                         const std::function<std::string(uint32_t)>& service_of);
  uint64_t delivered(uint32_t id) const { return id < tallies_.size() ? tallies_[id] : 0; }
  const control::EstimateCorrector& estimates() const { return estimates_; }

 private:
  struct Mark {
    loader::ProbeCounters counters;
    uint64_t delivered = 0;
    double estimate = 0;
  };
  std::vector<uint64_t> tallies_;  // indexed by probe id: no lookup per event
  std::vector<Mark> marks_;
  control::EstimateCorrector estimates_;
};

}  // namespace mcp::runtime
