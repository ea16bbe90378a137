#include "pipeline/ring_consumer.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace mcp::pipeline {

RingConsumer::RingConsumer(int ringbuf_fd, ProbeNameLookup names, Handler handler)
    : names_(std::move(names)), handler_(std::move(handler)) {
  rb_ = ring_buffer__new(ringbuf_fd, &RingConsumer::on_record, this, nullptr);
  if (!rb_) throw runtime_error(std::string("cannot open the ring buffer: ") + std::strerror(errno));
}

RingConsumer::~RingConsumer() { ring_buffer__free(rb_); }

int RingConsumer::on_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<RingConsumer*>(ctx);
  if (!decode_record(data, size, self->names_, self->scratch_)) {
    self->malformed_++;
    return 0;
  }
  self->decoded_++;
  self->handler_(self->scratch_);
  return 0;
}

int RingConsumer::poll(int timeout_ms) {
  int n = ring_buffer__poll(rb_, timeout_ms);
  if (n < 0 && n != -EINTR) throw runtime_error(std::string("ring buffer poll failed: ") + std::strerror(-n));
  return std::max(n, 0) + drain();
}

int RingConsumer::drain() {
  int n = ring_buffer__consume(rb_);
  if (n < 0 && n != -EINTR) throw runtime_error(std::string("ring buffer consume failed: ") + std::strerror(-n));
  return std::max(n, 0);
}

}  // namespace mcp::pipeline
