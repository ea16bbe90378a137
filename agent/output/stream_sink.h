// StreamSink: an EventSink that formats events into a buffer and writes them to
// a file descriptor (stdout by default) in large writes. flush() writes what is
// buffered; poll_done() does the same after each poll, so output stays live.
#pragma once
#include <memory>
#include <string>

#include "common/sink.h"
#include "output/formatter.h"

namespace mcp::output {

class StreamSink final : public EventSink {
 public:
  StreamSink(std::unique_ptr<Formatter> formatter, int fd);
  void consume(const Event& event) override;
  void flush() override;
  void poll_done() override { flush(); }

 private:
  std::unique_ptr<Formatter> formatter_;
  int fd_;
  bool header_written_ = false;
  std::string buffer_;
};

}  // namespace mcp::output
