#include "output/stream_sink.h"

#include <unistd.h>

#include <cerrno>

namespace mcp::output {

namespace {
constexpr size_t kFlushBytes = 256 * 1024;
}

StreamSink::StreamSink(std::unique_ptr<Formatter> formatter, int fd) : formatter_(std::move(formatter)), fd_(fd) {
  buffer_.reserve(kFlushBytes * 2);
}

void StreamSink::consume(const Event& event) {
  if (!header_written_) {
    formatter_->header(buffer_);
    header_written_ = true;
  }
  formatter_->format(event, buffer_);
  if (buffer_.size() >= kFlushBytes) flush();
}

void StreamSink::flush() {
  size_t off = 0;
  while (off < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + off, buffer_.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // a closed pipe (e.g. `| head`) must not take the agent down
    }
    off += static_cast<size_t>(n);
  }
  buffer_.clear();
}

}  // namespace mcp::output
