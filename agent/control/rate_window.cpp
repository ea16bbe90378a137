#include "control/rate_window.h"

#include <algorithm>

#include "common/error.h"

namespace mcp::control {

RateWindow::RateWindow(RateWindowConfig config)
    : bucket_ns_(config.bucket.count()), slots_(config.buckets) {
  if (bucket_ns_ <= 0 || config.buckets == 0) {
    throw usage_error("rate window: bucket width and bucket count must be positive");
  }
}

void RateWindow::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  started_ = false;
  first_ns_ = last_ns_ = last_value_ = 0;
}

void RateWindow::add(int64_t index, double count) {
  Slot& slot = slots_[static_cast<std::size_t>(index) % slots_.size()];
  if (slot.index > index) return;  // older than anything the window still holds
  if (slot.index != index) slot = Slot{index, 0.0};
  slot.count += count;
}

void RateWindow::observe(uint64_t now_ns, uint64_t cumulative) {
  if (!started_) {
    started_ = true;
    first_ns_ = last_ns_ = now_ns;
    last_value_ = cumulative;
    return;
  }
  now_ns = std::max(now_ns, last_ns_);
  uint64_t delta;
  if (cumulative >= last_value_) {
    delta = cumulative - last_value_;
  } else {
    delta = cumulative;  // reset: the counter restarted from zero since the last look
    ++resets_;
  }
  last_value_ = cumulative;

  const int64_t b = bucket_ns_;
  const int64_t from = static_cast<int64_t>(last_ns_);
  const int64_t to = static_cast<int64_t>(now_ns);
  last_ns_ = now_ns;
  if (delta == 0) return;
  if (to == from) {
    add(std::max<int64_t>(to - 1, 0) / b, static_cast<double>(delta));
    return;
  }
  // Spread over [from, to): a gap longer than the window only keeps its tail.
  const int64_t last_bucket = (to - 1) / b;
  const int64_t first_bucket =
      std::max(from / b, last_bucket - static_cast<int64_t>(slots_.size()) + 1);
  const double per_ns = static_cast<double>(delta) / static_cast<double>(to - from);
  for (int64_t i = first_bucket; i <= last_bucket; ++i) {
    const int64_t lo = std::max(from, i * b);
    const int64_t hi = std::min(to, (i + 1) * b);
    add(i, per_ns * static_cast<double>(hi - lo));
  }
}

std::pair<double, int64_t> RateWindow::tail(std::size_t nbuckets) const {
  if (!started_ || last_ns_ <= first_ns_) return {0.0, 0};
  nbuckets = std::clamp<std::size_t>(nbuckets, 1, slots_.size());
  const int64_t end = static_cast<int64_t>(last_ns_);
  const int64_t last_bucket = (end - 1) / bucket_ns_;
  const int64_t first_bucket = last_bucket - static_cast<int64_t>(nbuckets) + 1;
  double sum = 0;
  for (const Slot& slot : slots_) {
    if (slot.index >= first_bucket && slot.index <= last_bucket) sum += slot.count;
  }
  const int64_t start = std::max(static_cast<int64_t>(first_ns_), first_bucket * bucket_ns_);
  return {sum, end - start};
}

double RateWindow::rate_per_s() const { return rate_per_s(window()); }

double RateWindow::rate_per_s(std::chrono::nanoseconds span) const {
  const auto n = static_cast<std::size_t>((span.count() + bucket_ns_ - 1) / bucket_ns_);
  const auto [sum, ns] = tail(n);
  if (ns <= 0) return 0.0;
  return sum * 1e9 / static_cast<double>(ns);
}

double RateWindow::count_in_window() const { return tail(slots_.size()).first; }

std::chrono::nanoseconds RateWindow::covered() const {
  return std::chrono::nanoseconds(tail(slots_.size()).second);
}

}  // namespace mcp::control
