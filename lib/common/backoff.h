// Backoff: how long to wait before the next attempt of a connection that keeps failing, and
// which endpoint of a fail-over list to try next. The agent's forwarder, the subscriber and the
// OTLP exporter all retry through it.
//
// Contract:
// - failed() returns the wait before the next attempt and moves to the next endpoint (0, 1, ...,
//   n-1, 0, ...: each is tried in the listed order, so one dead broker does not hold the rest).
// - The wait is "equal jitter": uniform in [d/2, d], where d starts at `initial` and doubles per
//   failure up to `max`. Half is fixed, so a retry never comes at once; half is random, so
//   clients that failed together (a broker restart) do not retry in step.
// - succeeded() (the attempt made progress) starts d from `initial` again; the endpoint stays.
// Not thread-safe: one per retrying loop.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>

namespace mcp {

class Backoff {
 public:
  using Duration = std::chrono::milliseconds;
  // endpoints >= 1; seed fixes the jitter (tests).
  Backoff(Duration initial, Duration max, size_t endpoints = 1, uint64_t seed = std::random_device{}());

  size_t endpoint() const { return endpoint_; }
  Duration failed();
  void succeeded() { next_ = initial_; }

 private:
  Duration initial_, max_, next_;
  size_t endpoints_;
  size_t endpoint_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace mcp
