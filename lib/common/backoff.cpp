#include "common/backoff.h"

#include <algorithm>

namespace mcp {

Backoff::Backoff(Duration initial, Duration max, size_t endpoints, uint64_t seed)
    : initial_(std::max(initial, Duration(1))),
      max_(std::max(max, initial_)),
      next_(initial_),
      endpoints_(std::max<size_t>(endpoints, 1)),
      rng_(seed) {}

Backoff::Duration Backoff::failed() {
  std::uniform_int_distribution<Duration::rep> pick(next_.count() / 2, next_.count());
  const Duration wait(pick(rng_));
  next_ = std::min(next_ * 2, max_);
  endpoint_ = (endpoint_ + 1) % endpoints_;
  return wait;
}

}  // namespace mcp
