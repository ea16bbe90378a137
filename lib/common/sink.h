// EventSink: where decoded events go (stdout/file formatter, broker forwarder, test
// collector). The runtime (runtime/runtime.h) fans every kept event out to its sinks:
//   consume()         on the consumer thread for every kept event, in kernel order per CPU;
//                     must not block for long.
//   consume_counts()  the per-interval probe counters (deltas); sinks that ship them override.
//   poll_done()       after each ring poll: write out what is buffered so output stays live;
//                     must not block for long.
//   flush()           must not return before accepted events are durable or delivered.
//   drain()           the shutdown wait: like flush() but bounded by `limit`, and ending early
//                     (false) once give_up() is true (a second SIGINT). True: all delivered.
//   report()          after drain(): one summary line and what did not arrive.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/event.h"

namespace mcp {

// One probe's kernel counters over one interval (deltas), for the broker's exact seen count
// and corrected estimate (see ProbeCounts in proto/mcp/v1/sampling.proto).
struct ProbeIntervalCounts {
  std::string service;
  std::string probe;
  uint64_t seen = 0, kept = 0, lost = 0, quota_dropped = 0, orphaned = 0, delivered = 0;
  double estimate = 0;
};

// What a sink says at the end of a run.
struct SinkReport {
  std::string summary;      // one line for the run's summary; empty: nothing to say
  std::string undelivered;  // one sentence when accepted events did not arrive; empty: all did
  uint64_t lost = 0;        // accepted events that are gone
  uint64_t kept = 0;        // accepted events kept on disk, sent by a later run
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void consume(const Event& event) = 0;
  virtual void consume_counts(const std::vector<ProbeIntervalCounts>&) {}
  virtual void poll_done() {}
  virtual void flush() {}
  virtual bool drain(std::chrono::milliseconds /*limit*/, const std::function<bool()>& /*give_up*/) {
    flush();
    return true;
  }
  virtual SinkReport report() const { return {}; }
};

}  // namespace mcp
