// unix_ns(): the wall clock (CLOCK_REALTIME) in ns since the epoch, for stamps that leave the
// process: a batch's creation time, the broker's HLC, OTLP metric times. Code whose time a test
// must control takes a ClockSource (clock_source.h) instead.
#pragma once
#include <chrono>
#include <cstdint>

namespace mcp::clock {

inline uint64_t unix_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace mcp::clock
