// EstimateCorrector: per-probe estimates of the true call count that survive tenant quotas,
// ring-buffer loss and calls whose return never came.
//
// A delivered event's weight (1/p) counts the calls its sampling decision stood for, but
// only if every event sampled in is delivered. Per probe and interval (the agent closes one
// every second, and a last one after detaching and draining):
//   sampled_in = kept + quota_dropped   (kernel counters over the interval; kept is
//                                        delivered + lost + orphaned once drained)
//   factor     = sampled_in / delivered  (delivered: events the agent decoded in the interval)
//   estimate  += factor * (sum of the weights delivered in the interval)
// An interval with sampled-in events and nothing delivered carries them into the next one;
// what is still carried at the end has no delivered event to stand for it and is reported
// by uncovered(). Thread safety: none; one thread delivers and closes.
#pragma once
#include <cstdint>
#include <unordered_map>

namespace mcp::control {

class EstimateCorrector {
 public:
  void on_delivered(uint32_t probe, double weight);
  // Cumulative kernel counters of `probe` now; closes its interval.
  void close_interval(uint32_t probe, uint64_t kept, uint64_t quota_dropped);
  // Sum over closed intervals.
  double estimate(uint32_t probe) const;
  uint64_t uncovered(uint32_t probe) const;

 private:
  struct State {
    uint64_t last_sampled_in = 0;  // kernel counters at the previous close
    uint64_t carried = 0;          // sampled in, awaiting a delivered event
    uint64_t delivered = 0;        // in the open interval
    double weights = 0;            // in the open interval
    double estimate = 0;
  };
  std::unordered_map<uint32_t, State> probes_;
};

}  // namespace mcp::control
