#include "forward/batch_closer.h"

#include <algorithm>
#include <utility>

namespace mcp {

BatchCloser::Action BatchCloser::added(size_t events) {
  if (events == 1) oldest_ = now_();
  if (events >= rules_.max_events) return Action::kClose;
  // Nobody ends bursts: only the timer closes this block (linger or age), so it must know.
  return events == 1 && !driven_ ? Action::kTime : Action::kKeep;
}

BatchCloser::Action BatchCloser::burst_ended(size_t events, bool wire_idle) {
  driven_ = true;
  if (events == 0) return Action::kKeep;
  const TimePoint now = now_();
  if (wire_idle) return close_or_time(now);
  return now >= oldest_ + rules_.age ? Action::kClose : Action::kKeep;
}

BatchCloser::Action BatchCloser::wire_idle(size_t events) {
  return events > 0 ? close_or_time(now_()) : Action::kKeep;
}

BatchCloser::Action BatchCloser::close_or_time(TimePoint now) {
  // Within the gap under heavy traffic, waiting costs a little latency at a rate where batches
  // are plentiful and saves the broker a batch's fixed cost (docs/performance.md, system/e2e round 8).
  if (!(heavy() && now < last_close_ + rules_.gap)) return Action::kClose;
  if (gap_timed_) return Action::kKeep;  // once per block
  gap_timed_ = true;
  return Action::kTime;
}

BatchCloser::Due BatchCloser::due(size_t events, bool wire_idle) const {
  const TimePoint now = now_();
  const TimePoint next = now + kIdlePoll;
  if (events == 0) return {false, next};
  TimePoint at = oldest_ + (wire_idle && !driven_ ? rules_.linger : rules_.age);
  if (wire_idle && heavy())  // at the gap's end, never after the age
    at = std::min(oldest_ + rules_.age, std::max(driven_ ? oldest_ : at, last_close_ + rules_.gap));
  if (now < at) return {false, std::min(next, at)};
  return {true, next};
}

void BatchCloser::closed(size_t events) {
  last_close_ = now_();
  last_events_ = events;
  gap_timed_ = false;
}

}  // namespace mcp
