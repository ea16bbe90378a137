// BatchCloser: when the forwarder's open block is closed into a batch. Pure rules over the
// block's event count, the wire's state and an injected clock: no threads, no gRPC, so a test
// drives it with a fake clock.
//
// The rules (ForwarderOptions, forwarder.h, says why):
// - full: a block reaching `max_events` closes at once;
// - acknowledgement-driven: while the broker has acknowledged everything sent (the wire is
//   idle) a block closes when the caller's burst ends, or when the wire turns idle: at light
//   traffic one batch per acknowledgement (Nagle's rule, the other way round);
// - heavy traffic (the previous batch held `burst` events or more): on an idle wire a block
//   closes only `gap` after the previous batch;
// - age: otherwise a block closes `age` after its first event, or `linger` after it while the
//   wire is idle and nobody ends bursts (callers that never call poll_done()).
// Flushes and counter batches close the block regardless; the caller reports every close with
// closed(). Not thread-safe: the caller guards it with the block's lock.
// A further rule is one more field of Rules and one more candidate in due().
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

namespace mcp {

class BatchCloser {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Now = std::function<TimePoint()>;

  // ForwarderOptions' fields of the same meaning (forwarder.h holds the defaults).
  struct Rules {
    size_t max_events = 0;             // batch_count
    std::chrono::nanoseconds age{};    // batch_age
    std::chrono::nanoseconds linger{}; // batch_linger
    size_t burst = 0;                  // batch_burst
    std::chrono::nanoseconds gap{};    // batch_gap
  };

  // What the caller does with the open block.
  enum class Action {
    kKeep,   // nothing now
    kClose,  // close it now
    kTime,   // wake the timer (due()): it holds a deadline for this block it did not know of
  };

  // The timer's answer: close now or not, and when to call due() again at the latest.
  struct Due {
    bool close = false;
    TimePoint next;
  };

  // The timer looks again at least this often, with or without a block.
  static constexpr std::chrono::milliseconds kIdlePoll{50};

  explicit BatchCloser(Rules rules, Now now = Clock::now) : rules_(rules), now_(std::move(now)) {}

  // An event was added; the open block now holds `events`. Reads the clock only for a block's
  // first event: the per-event path stays free of clock reads.
  Action added(size_t events);
  // The caller's burst is over (poll_done()): from now on bursts end the blocks.
  Action burst_ended(size_t events, bool wire_idle);
  // Everything sent is acknowledged (the wire turned idle).
  Action wire_idle(size_t events);
  // The timer: is the block due, and when to look again.
  Due due(size_t events, bool wire_idle) const;
  // A batch was closed (by any rule, a flush or counters) holding `events`.
  void closed(size_t events);

 private:
  // Heavy traffic: the last batch held `burst` events or more.
  bool heavy() const { return last_events_ >= rules_.burst; }
  // On an idle wire: close now, or, within the gap, have the timer close it at the gap's end.
  Action close_or_time(TimePoint now);

  const Rules rules_;
  const Now now_;
  TimePoint oldest_{};      // the open block's first event
  bool driven_ = false;     // someone ends bursts (burst_ended)
  TimePoint last_close_{};  // the last batch closed
  size_t last_events_ = 0;  // and its events
  bool gap_timed_ = false;  // the timer already knows this block waits for the gap's end
};

}  // namespace mcp
