// RingConsumer: drains the BPF ring buffer, decodes each record and hands it to a handler on
// the calling thread (the runtime's enrichment chain, enrich/enrich_chain.h, comes next).
// The producers wake it only past a backlog (adaptive wake-up), so poll() always also
// consumes what is pending when its short timeout expires. Not thread-safe: one consumer
// thread.
#pragma once
#include <cstdint>
#include <functional>

#include "common/event.h"
#include "pipeline/decoder.h"

struct ring_buffer;

namespace mcp::pipeline {

// How long a consumer waits for a wake-up before draining anyway. Producers wake
// it only past a backlog, so this bounds the latency of a quiet stream; 500
// wake-ups a second cost next to nothing.
inline constexpr int kPollTimeoutMs = 2;

class RingConsumer {
 public:
  using Handler = std::function<void(Event&)>;
  RingConsumer(int ringbuf_fd, ProbeNameLookup names, Handler handler);
  ~RingConsumer();
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // Waits up to timeout_ms for a wake-up, then consumes everything pending.
  // Returns the number of records handled; EINTR is not an error.
  int poll(int timeout_ms);
  // Consumes everything pending without waiting.
  int drain();

  uint64_t decoded() const { return decoded_; }
  uint64_t malformed() const { return malformed_; }

 private:
  static int on_record(void* ctx, void* data, size_t size);

  ring_buffer* rb_ = nullptr;
  ProbeNameLookup names_;
  Handler handler_;
  Event scratch_;
  uint64_t decoded_ = 0;
  uint64_t malformed_ = 0;
};

}  // namespace mcp::pipeline
