// PacketPrinter: renders the broker's SamplePackets with the agent's one event encoder
// (output/formatter.h), so `subscribe` prints the same bytes as `trace` for the same event.
// JSON lines then get the broker's fields appended in a fixed order before the closing brace:
//   ,"agent_id":"...","event_id":N[,"received_ns":N]}
// Compact packets (SamplePacket.events, "events-v2") and v1 Samples from older brokers go
// through the same path: each becomes a reused mcp::Event, so printing allocates nothing per
// event once warm. The broker is a peer, not trusted: a malformed block throws mcp::Error
// (runtime) naming the packet, nothing is read out of range.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/event.h"
#include "wire/event_block.h"
#include "mcp/v1/sampling.pb.h"
#include "output/formatter.h"

namespace mcp {

class PacketPrinter {
 public:
  // format: "json" or "table" (usage error otherwise); receipt_ns adds received_ns (wall clock
  // when the packet was printed, the clock of ts_ns) to JSON lines.
  PacketPrinter(std::string_view format, bool receipt_ns);
  void header(std::string& out) const;
  // Appends at most `max_events` of the packet's events to `out`; returns how many.
  uint64_t print(const mcp::v1::SamplePacket& packet, std::string& out, uint64_t max_events);

 private:
  void set_agent(std::string_view agent_id);
  void emit(uint64_t event_id, std::string& out);

  std::unique_ptr<output::Formatter> formatter_;
  bool json_;
  bool receipt_ns_;
  // ,"agent_id":"...","event_id": for agent_id_, and what follows the event id (received_ns,
  // the closing brace), rendered once per packet.
  std::string agent_id_;
  std::string agent_fields_;
  bool agent_fields_ready_ = false;
  std::string tail_;
  Event event_;
  EventBlockDecoder decoder_;
  std::string error_;
};

}  // namespace mcp
