// OtlpSink: OTLP export as one more sink of the agent (EventSink, common/sink.h), for nodes
// without a broker.
//
// Contract:
// - consume() encodes the event into an open compact block (wire/event_block.h: the encoding
//   agents send the broker, strings repaired to UTF-8); the block is offered to an Exporter
//   (exporter.h) once it holds `block_events` events or has been open for the exporter's
//   batch_interval (a timer thread sees to quiet periods), so the agent and the broker map
//   events to OTLP with the same code. consume() never waits on the network: a full exporter
//   queue drops, counted.
// - flush() (shutdown) offers the open block and shuts the exporter down with `grace`: what the
//   collector has not accepted by then is counted failed or dropped in stats().
// - drain(limit, give_up) (the runtime's shutdown wait) is flush() bounded by `limit` and ended
//   early by give_up(); true when the collector accepted every event consumed. report() then
//   names the collector's counts and, when some did not arrive, how many (all are lost: there
//   is no spool), so a run whose collector is down ends non-zero.
// - consume() and flush() come from one consumer thread; the open block has its own lock for
//   the timer.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/sink.h"
#include "wire/event_block.h"
#include "otlp/exporter.h"

namespace mcp::otlp {

class OtlpSink final : public EventSink {
 public:
  // Throws mcp::Error (usage) for bad exporter options.
  OtlpSink(ExporterOptions options, Origin origin, size_t block_events = 256,
           std::chrono::milliseconds grace = std::chrono::seconds(5));
  ~OtlpSink() override;
  void consume(const Event& event) override;
  void flush() override;
  bool drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) override;
  SinkReport report() const override;
  ExporterStats stats() const { return exporter_.stats(); }
  // An audit trail record, exported as a log record beside the events (any thread; never
  // waits). Counted with the events in drain() and report().
  void consume_audit(AuditEntry entry);

 private:
  void offer_open_block();  // with mu_ held

  Exporter exporter_;
  const std::string endpoint_;
  const Origin origin_;
  const size_t block_events_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds grace_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  EventBlockEncoder encoder_;
  uint64_t consumed_ = 0;  // events consume() and records consume_audit() took, under mu_
  std::chrono::steady_clock::time_point opened_{};
  std::thread timer_;
};

}  // namespace mcp::otlp
