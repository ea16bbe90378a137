// EventSink: where decoded events go (stdout formatter, broker forwarder, test
// collector). consume() is called on the consumer thread for every kept event, in
// kernel order per CPU; it must not block for long. flush() is called on shutdown
// and must not return before accepted events are durable or delivered.
#pragma once
#include "common/event.h"

namespace mcp {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void consume(const Event& event) = 0;
  virtual void flush() {}
};

}  // namespace mcp
