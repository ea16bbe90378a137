// PacketPrinter against the one JSON encoder: every line it prints for a compact block or a
// v1 packet is the line `trace` prints for the same event (output/formatter.h, pinned by
// tests/fixtures/json_golden.jsonl) with the broker's fields before the closing brace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "wire/event_block.h"
#include "wire/samples.h"
#include "golden_events.h"
#include "output/formatter.h"
#include "subscribe/packet_printer.h"

namespace mcp {
namespace {

constexpr uint64_t kFirstId = 1000000;

// The trace encoder's line for `e` with the broker's fields, as the subscriber must print it.
std::string expected_line(const Event& e, std::string_view agent_id, uint64_t event_id) {
  std::string line;
  output::make_formatter("json")->format(e, line);
  line.resize(line.size() - 2);
  line += ",\"agent_id\":";
  output::append_json_string(line, agent_id);
  line += ",\"event_id\":" + std::to_string(event_id) + "}\n";
  return line;
}

mcp::v1::SamplePacket compact_packet(const std::vector<Event>& events, const std::string& agent_id) {
  EventBlockEncoder enc;
  for (const auto& e : events) enc.add(e);
  mcp::v1::EventBlock block;
  enc.finish(&block);
  for (int i = 0; i < block.events_size(); ++i) block.mutable_events(i)->set_event_id(kFirstId + i);
  mcp::v1::SamplePacket packet;
  packet.set_agent_id(agent_id);
  packet.set_offset(7);
  packet.set_events(block.SerializeAsString());
  return packet;
}

// What crossed the wire, as the receiving side sees it (strings repaired, comm cut, pairs sorted).
// The events view strings `dec` owns.
std::vector<Event> decoded(const mcp::v1::SamplePacket& packet, EventBlockDecoder& dec, std::vector<uint64_t>& ids) {
  std::string error;
  EXPECT_TRUE(dec.parse(packet.events(), error)) << error;
  std::vector<Event> out(dec.size());
  ids.resize(dec.size());
  for (size_t i = 0; i < dec.size(); ++i) dec.get(i, out[i], ids[i]);
  return out;
}

TEST(PacketPrinter, CompactLinesAreTheTraceEncodersBytesPlusBrokerFields) {
  const auto golden = test::golden_events();
  const auto packet = compact_packet(golden.events, "node-\"1\"");
  EventBlockDecoder dec;
  std::vector<uint64_t> ids;
  const auto events = decoded(packet, dec, ids);
  std::string want;
  for (size_t i = 0; i < events.size(); ++i) want += expected_line(events[i], packet.agent_id(), ids[i]);
  PacketPrinter printer("json", false);
  std::string out = "kept\n";
  EXPECT_EQ(printer.print(packet, out, UINT64_MAX), golden.events.size());
  EXPECT_EQ(out, "kept\n" + want);
  // A second packet through the same (warm) printer prints the same bytes.
  out.clear();
  printer.print(packet, out, UINT64_MAX);
  EXPECT_EQ(out, want);
}

// The events whose strings are valid UTF-8 cross the wire unchanged: subscribe prints exactly
// trace's line for the original event (the unit form of the AgentBrokerE2E golden test).
TEST(PacketPrinter, ValidEventsPrintAsTracePrintedThem) {
  const auto golden = test::golden_events();
  std::vector<Event> valid = {golden.events[0], golden.events[1], golden.events[2], golden.events[3],
                              golden.events[5], golden.events[6], golden.events[7], golden.events[8]};
  // trace prints tags in key order, repeated keys in their given order: so does the wire.
  const auto packet = compact_packet(valid, "node-1");
  std::string want;
  for (size_t i = 0; i < valid.size(); ++i) want += expected_line(valid[i], "node-1", kFirstId + i);
  PacketPrinter printer("json", false);
  std::string out;
  printer.print(packet, out, UINT64_MAX);
  EXPECT_EQ(out, want);
}

TEST(PacketPrinter, V1SamplesPrintThroughTheSameEncoder) {
  const auto golden = test::golden_events();
  mcp::v1::SamplePacket packet;
  packet.set_agent_id("node-1");
  for (size_t i = 0; i < golden.events.size(); ++i) {
    auto* s = packet.add_samples();
    to_sample(golden.events[i], s);
    s->set_event_id(kFirstId + i);
    if (i % 2) s->set_agent_id("other-agent");  // a sample's own agent id wins
  }
  std::string want;
  Event e;
  for (int i = 0; i < packet.samples_size(); ++i) {
    from_sample(packet.samples(i), e);
    want += expected_line(e, i % 2 ? "other-agent" : "node-1", kFirstId + static_cast<uint64_t>(i));
  }
  PacketPrinter printer("json", false);
  std::string out;
  EXPECT_EQ(printer.print(packet, out, UINT64_MAX), golden.events.size());
  EXPECT_EQ(out, want);
}

TEST(PacketPrinter, StopsAtMaxEvents) {
  const auto golden = test::golden_events();
  const auto packet = compact_packet(golden.events, "node-1");
  PacketPrinter printer("json", false);
  std::string out;
  EXPECT_EQ(printer.print(packet, out, 3), 3u);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
  out.clear();
  EXPECT_EQ(printer.print(packet, out, 0), 0u);
  EXPECT_TRUE(out.empty());
}

TEST(PacketPrinter, ReceiptTimeIsTheLastField) {
  const auto golden = test::golden_events();
  const auto packet = compact_packet({golden.events[0], golden.events[1]}, "node-1");
  PacketPrinter printer("json", true);
  std::string out;
  printer.print(packet, out, UINT64_MAX);
  size_t lines = 0;
  for (size_t b = 0, e; (e = out.find('\n', b)) != std::string::npos; b = e + 1, ++lines) {
    const std::string line = out.substr(b, e - b);
    const auto cut = line.find(",\"received_ns\":");
    ASSERT_NE(cut, std::string::npos) << line;
    EXPECT_EQ(line.substr(0, cut) + "}\n", expected_line(golden.events[lines], "node-1", kFirstId + lines));
    const auto j = nlohmann::json::parse(line);
    EXPECT_GT(j["received_ns"].get<uint64_t>(), 1700000000000000000ull);
  }
  EXPECT_EQ(lines, 2u);
}

TEST(PacketPrinter, TableRowsAreTheTableFormattersRows) {
  const auto golden = test::golden_events();
  const auto packet = compact_packet({golden.events[0], golden.events[5]}, "node-1");
  EventBlockDecoder dec;
  std::vector<uint64_t> ids;
  const auto events = decoded(packet, dec, ids);
  auto table = output::make_formatter("table");
  std::string want;
  table->header(want);
  for (const auto& e : events) table->format(e, want);
  PacketPrinter printer("table", false);
  std::string out;
  printer.header(out);
  printer.print(packet, out, UINT64_MAX);
  EXPECT_EQ(out, want);
}

TEST(PacketPrinter, MalformedBlockIsARuntimeErrorNamingTheOffset) {
  mcp::v1::SamplePacket packet;
  packet.set_offset(42);
  packet.set_events(std::string("\xff\xff\xff", 3));
  PacketPrinter printer("json", false);
  std::string out;
  try {
    printer.print(packet, out, UINT64_MAX);
    FAIL() << "printed a malformed block";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("offset 42"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mcp
