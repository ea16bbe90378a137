#include "subscribe/packet_printer.h"

#include <fmt/format.h>

#include <chrono>

#include "common/error.h"
#include "wire/samples.h"

namespace mcp {

PacketPrinter::PacketPrinter(std::string_view format, bool receipt_ns)
    : formatter_(output::make_formatter(format)), json_(format == "json"), receipt_ns_(receipt_ns) {}

void PacketPrinter::header(std::string& out) const { formatter_->header(out); }

void PacketPrinter::set_agent(std::string_view agent_id) {
  if (agent_fields_ready_ && agent_id == agent_id_) return;
  agent_id_.assign(agent_id);
  agent_fields_ = ",\"agent_id\":";
  output::append_json_string(agent_fields_, agent_id);
  agent_fields_ += ",\"event_id\":";
  agent_fields_ready_ = true;
}

// The broker's fields go in before the encoder's closing "}\n"; the parts that are the same
// for the whole packet (agent id, receipt time) are rendered once per packet, not per event.
void PacketPrinter::emit(uint64_t event_id, std::string& out) {
  formatter_->format(event_, out);
  if (!json_) return;
  out.resize(out.size() - 2);  // the encoder's "}\n"
  out += agent_fields_;
  const fmt::format_int id(event_id);
  out.append(id.data(), id.size());
  out += tail_;
}

uint64_t PacketPrinter::print(const mcp::v1::SamplePacket& packet, std::string& out, uint64_t max_events) {
  tail_.clear();
  if (receipt_ns_) {
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    tail_ = ",\"received_ns\":";
    const fmt::format_int ns(static_cast<uint64_t>(now_ns));
    tail_.append(ns.data(), ns.size());
  }
  tail_ += "}\n";
  uint64_t printed = 0;
  if (!packet.events().empty()) {
    if (!decoder_.parse(packet.events(), error_))
      throw runtime_error("broker sent a malformed packet (offset " + std::to_string(packet.offset()) + "): " + error_);
    set_agent(packet.agent_id());
    uint64_t event_id = 0;
    for (size_t i = 0; i < decoder_.size() && printed < max_events; ++i, ++printed) {
      decoder_.get(i, event_, event_id);
      emit(event_id, out);
    }
  }
  for (int i = 0; i < packet.samples_size() && printed < max_events; ++i, ++printed) {
    const auto& s = packet.samples(i);
    from_sample(s, event_);
    set_agent(s.agent_id().empty() ? packet.agent_id() : s.agent_id());
    emit(s.event_id(), out);
  }
  return printed;
}

}  // namespace mcp
