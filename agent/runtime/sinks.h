// The runtime's sinks (see runtime.h: one class per kind, built from one RuntimeSpec field).
//   StreamFileSink  formatted events to stdout or a file it creates (and closes after drain)
//   BrokerSink      the Forwarder, with the operator's shutdown wait: after 200 ms without
//                   every ack it says how many events it waits for, then waits the rest of
//                   the limit; its report() names what stayed undelivered.
#pragma once
#include <memory>

#include "common/sink.h"
#include "forward/forwarder.h"
#include "output/stream_sink.h"

namespace mcp::runtime {

struct StreamSpec;

class StreamFileSink final : public EventSink {
 public:
  // Throws mcp::Error (runtime) when the file cannot be created.
  explicit StreamFileSink(const StreamSpec& spec);
  ~StreamFileSink() override;
  void consume(const Event& e) override { stream_->consume(e); }
  void poll_done() override { stream_->poll_done(); }
  void flush() override { stream_->flush(); }
  bool drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) override;

 private:
  int fd_ = -1;
  bool owns_fd_ = false;
  std::unique_ptr<output::StreamSink> stream_;
};

class BrokerSink final : public EventSink {
 public:
  explicit BrokerSink(std::unique_ptr<Forwarder> forwarder) : forwarder_(std::move(forwarder)) {}
  Forwarder& forwarder() { return *forwarder_; }
  void consume(const Event& e) override { forwarder_->consume(e); }
  void consume_counts(const std::vector<ProbeIntervalCounts>& c) override { forwarder_->consume_counts(c); }
  void poll_done() override { forwarder_->poll_done(); }
  void flush() override { forwarder_->flush(); }
  bool drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) override;
  SinkReport report() const override;

 private:
  std::unique_ptr<Forwarder> forwarder_;
};

}  // namespace mcp::runtime
