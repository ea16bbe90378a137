// Per-event cost of the compact wire format. Batches of 512 events like the forwarder's,
// a syscall event labelled with a service and two tags (the bench/system/e2e shape).
//   BM_EncodeBlock       agent: Event -> EventBlock bytes
//   BM_SubscribeCompact  subscriber: SamplePacket.events -> JSON lines written to a file
//   BM_SubscribeSamples  the same through v1 Samples (old brokers), for the ratio
//   BM_PrintCompact      BM_SubscribeCompact without the write(2): decode + JSON only
//   BM_FormatJson        the JSON encoder alone (output/formatter.h), as `trace` runs it
// items_per_second is events/s; the target for the subscriber is >= 500k events/s.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "broker/ingest/event_block.h"
#include "broker/ingest/publish_check.h"
#include "wire/event_block.h"
#include "events.h"          // tests/support: make_event
#include "subscribe/packet_printer.h"

namespace mcp {
namespace {

constexpr int kBatch = 512;

using test::make_event;

std::string block_bytes() {
  EventBlockEncoder enc;
  for (int i = 0; i < kBatch; ++i) enc.add(make_event(static_cast<uint32_t>(i)));
  std::string out;
  enc.finish(out);
  return out;
}

void BM_EncodeBlock(benchmark::State& state) {
  std::vector<Event> events;
  for (int i = 0; i < kBatch; ++i) events.push_back(make_event(static_cast<uint32_t>(i)));
  EventBlockEncoder enc;
  std::string out;
  for (auto _ : state) {
    for (const auto& e : events) enc.add(e);
    out.clear();
    enc.finish(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["bytes_per_event"] = static_cast<double>(out.size()) / kBatch;
}

// The broker's ingest of one compact batch: parse and check on an arena, set every event id,
// then the bytes it stores and fans out: re-encoded from the parsed block (before) or the
// received bytes with the ids added (broker/ingest/event_block.h with_event_ids, after).
void run_broker_ingest(benchmark::State& state, bool reencode) {
  const std::string wire = block_bytes();
  const std::string agent = "bench-agent";
  std::vector<uint64_t> ids;
  std::string stored;
  for (auto _ : state) {
    auto block = broker::make_arena_block(wire.size());
    if (!broker::parse_event_block(wire, {}, block.get()).ok()) state.SkipWithError("parse");
    ids.assign(static_cast<size_t>(block->events_size()), 0);
    uint32_t i = 0;
    const broker::BatchEventIds id_of(agent, 7);
    for (auto& e : *block->mutable_events()) {
      if (e.event_id() == 0) e.set_event_id(ids[i] = id_of(i));
      ++i;
    }
    if (reencode || !broker::with_event_ids(wire, ids, &stored)) block->SerializeToString(&stored);
    benchmark::DoNotOptimize(stored.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
void BM_BrokerIngestReencode(benchmark::State& state) { run_broker_ingest(state, true); }
void BM_BrokerIngestIdsOnWire(benchmark::State& state) { run_broker_ingest(state, false); }

// Decode + print + write(2) to a real file, one write per packet as the command does.
void run_subscriber(benchmark::State& state, const mcp::v1::SamplePacket& packet) {
  char path[] = "/tmp/bench_wire_XXXXXX";
  const int fd = mkstemp(path);
  PacketPrinter printer("json", true);
  std::string out;
  out.reserve(1 << 20);
  uint64_t bytes = 0;
  for (auto _ : state) {
    printer.print(packet, out, UINT64_MAX);
    if (::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) state.SkipWithError("write");
    bytes += out.size();
    out.clear();
    if (bytes > (256u << 20)) {  // keep the file small: start again
      (void)ftruncate(fd, 0);
      (void)lseek(fd, 0, SEEK_SET);
      bytes = 0;
    }
  }
  close(fd);
  unlink(path);
  state.SetItemsProcessed(state.iterations() * kBatch);
}

mcp::v1::SamplePacket compact_packet();

void BM_SubscribeCompact(benchmark::State& state) { run_subscriber(state, compact_packet()); }

void BM_SubscribeSamples(benchmark::State& state) {
  mcp::v1::SamplePacket packet;
  packet.set_agent_id("node-1");
  for (int i = 0; i < kBatch; ++i) {
    auto* s = packet.add_samples();
    mcp::to_sample(make_event(static_cast<uint32_t>(i)), s);
    s->set_agent_id("node-1");
    s->set_event_id(1000000 + i);
  }
  run_subscriber(state, packet);
}

mcp::v1::SamplePacket compact_packet() {
  mcp::v1::SamplePacket packet;
  packet.set_agent_id("node-1");
  mcp::v1::EventBlock block;
  block.ParseFromString(block_bytes());
  for (int i = 0; i < block.events_size(); ++i) block.mutable_events(i)->set_event_id(1000000 + i);
  packet.set_events(block.SerializeAsString());
  return packet;
}

void BM_PrintCompact(benchmark::State& state) {
  const auto packet = compact_packet();
  PacketPrinter printer("json", true);
  std::string out;
  out.reserve(1 << 20);
  for (auto _ : state) {
    out.clear();
    printer.print(packet, out, UINT64_MAX);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["json_bytes_per_event"] = static_cast<double>(out.size()) / kBatch;
}

void BM_FormatJson(benchmark::State& state) {
  std::vector<Event> events;
  for (int i = 0; i < kBatch; ++i) events.push_back(make_event(static_cast<uint32_t>(i)));
  const auto json = output::make_formatter("json");
  std::string out;
  out.reserve(1 << 20);
  for (auto _ : state) {
    out.clear();
    for (const auto& e : events) json->format(e, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

BENCHMARK(BM_EncodeBlock);
BENCHMARK(BM_BrokerIngestReencode);
BENCHMARK(BM_BrokerIngestIdsOnWire);
BENCHMARK(BM_SubscribeCompact);
BENCHMARK(BM_SubscribeSamples);
BENCHMARK(BM_PrintCompact);
BENCHMARK(BM_FormatJson);

}  // namespace
}  // namespace mcp

BENCHMARK_MAIN();
