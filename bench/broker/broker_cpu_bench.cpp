// bench_broker_cpu: the mcp-broker process's CPU time per event (utime + stime from
// /proc/PID/stat) at a paced rate, one publisher stream and one unfiltered subscriber on
// loopback, for the v1 encoding (Batch.samples -> SamplePacket.samples) and the compact one
// (Batch.events -> SamplePacket.events, capability "events-v2"). Batches are built before the
// clock starts, so only the broker's work is measured; it prints both and their ratio.
//   bench_broker_cpu [--rate 200000] [--events 1000000] [--batch 512] [--mode both|v1|compact]
//                    [--state-dir] (journal on disk instead of memory)
// MCP_BROKER_BIN=path runs another build's broker (e.g. main's, for a before/after).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "broker_client.h"
#include "broker_process.h"
#include "compact_block.h"
#include "proc_usage.h"

using namespace std::chrono_literals;

namespace {

using mcp::test::cpu_seconds;

// Batches as an agent would send them: service/tags/probe repeat, args differ per event.
std::vector<std::string> make_batches(bool compact, uint64_t events, int batch) {
  std::vector<std::string> out;
  uint64_t seq = 1;
  for (uint64_t first = 0; first < events; first += static_cast<uint64_t>(batch), ++seq) {
    const int n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(batch), events - first));
    auto block = mcp::test::compact_block(n, first);
    for (auto& e : *block.mutable_events()) e.clear_cuda(), e.set_attributes(0);
    mcp::v1::AgentMessage m;
    if (compact) {
      m = mcp::test::compact_batch_message(seq, block);
    } else {
      m.mutable_batch()->set_sequence(seq);
      for (const auto& e : block.events()) {
        auto* s = m.mutable_batch()->add_samples();
        s->set_ts_ns(e.ts_ns());
        s->set_kind("syscall");
        s->set_probe(block.strings(static_cast<int>(e.probe())));
        s->set_pid(e.pid());
        s->set_tid(e.tid());
        s->set_comm(block.strings(static_cast<int>(e.comm())));
        s->set_service(block.strings(static_cast<int>(e.service())));
        const auto& tags = block.pair_sets(static_cast<int>(e.tags()));
        (*s->mutable_tags())[block.strings(static_cast<int>(tags.keys(0)))] =
            block.strings(static_cast<int>(tags.values(0)));
        s->add_args(e.args(0));
        s->set_threshold(e.threshold());
      }
    }
    out.push_back(m.SerializeAsString());
  }
  return out;
}

struct Result {
  double cpu_s = 0;
  double wall_s = 0;
  uint64_t received = 0;
};

Result run(bool compact, double rate, uint64_t events, int batch, bool state_dir) {
  const auto dir = mcp::test::make_temp_dir("mcp-bench-broker-cpu");
  std::vector<std::string> args;
  if (state_dir) args = {"--state-dir", (dir / "state").string()};
  mcp::test::BrokerProcess broker(args, dir / "broker.log");
  const auto batches = make_batches(compact, events, batch);
  mcp::v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(compact ? "bench-compact" : "bench-v1");
  if (compact) hello.mutable_hello()->add_capabilities("events-v2");

  std::atomic<uint64_t> received{0};
  auto stub = mcp::test::stub_for(broker.address());
  grpc::ClientContext sub_ctx;
  std::thread sub([&] {
    mcp::v1::SubscriptionRequest req;
    req.set_compact(compact);
    auto reader = stub->Subscribe(&sub_ctx, req);
    mcp::v1::SamplePacket p;
    mcp::v1::EventBlock b;
    while (reader->Read(&p)) {
      uint64_t n = static_cast<uint64_t>(p.samples_size());
      if (!p.events().empty() && b.ParseFromString(p.events())) n += static_cast<uint64_t>(b.events_size());
      received += n;
    }
    reader->Finish();
  });
  mcp::test::wait_until([&] { return mcp::test::broker_stats(broker.address()).subscribers() == 1; }, 10s);

  auto channel = mcp::make_channel(broker.address(), {}, false);
  grpc::ClientContext ctx;
  const auto stream = mcp::test::raw_publish_stream(channel.get(), &ctx);
  std::thread acks([&] {
    mcp::v1::BrokerMessage reply;
    while (stream->Read(&reply)) {
    }
  });
  const auto write = [&](const std::string& bytes) { return stream->Write(mcp::test::byte_buffer(bytes)); };
  write(hello.SerializeAsString());
  const double cpu0 = cpu_seconds(broker.pid());
  const auto start = std::chrono::steady_clock::now();
  uint64_t sent = 0;
  for (const auto& b : batches) {
    if (rate > 0) {
      const auto due = start + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(sent) * 1e9 / rate));
      std::this_thread::sleep_until(due);
    }
    if (!write(b)) break;
    sent += static_cast<uint64_t>(batch);
  }
  mcp::test::wait_until([&] { return received >= events; }, 60s);
  Result r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.cpu_s = cpu_seconds(broker.pid()) - cpu0;
  r.received = received;
  stream->WritesDone();
  acks.join();
  stream->Finish();
  sub_ctx.TryCancel();
  sub.join();
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcp-broker CPU per event, v1 vs compact"};
  double rate = 200000;
  uint64_t events = 1000000;
  int batch = 512;
  std::string mode = "both";
  bool state_dir = false;
  app.add_option("--rate", rate, "events/s offered (0: unpaced)");
  app.add_option("--events", events, "events per run");
  app.add_option("--batch", batch, "events per batch (the agent's default is 512)");
  app.add_option("--mode", mode, "both | v1 | compact")->check(CLI::IsMember({"both", "v1", "compact"}));
  app.add_flag("--state-dir", state_dir, "journal on disk (default: memory)");
  CLI11_PARSE(app, argc, argv);

  std::printf("broker %s, %.0f ev/s offered, %llu events, batches of %d, journal %s\n",
              mcp::test::broker_binary().c_str(), rate, static_cast<unsigned long long>(events),
              batch, state_dir ? "on disk" : "in memory");
  double v1_us = 0;
  for (const bool compact : {false, true}) {
    if ((compact && mode == "v1") || (!compact && mode == "compact")) continue;
    const Result r = run(compact, rate, events, batch, state_dir);
    const double us = r.received ? r.cpu_s * 1e6 / static_cast<double>(r.received) : 0;
    std::printf("%-8s received %llu/%llu in %.2f s: broker CPU %.2f s = %.3f us/event", compact ? "compact" : "v1",
                static_cast<unsigned long long>(r.received), static_cast<unsigned long long>(events),
                r.wall_s, r.cpu_s, us);
    if (compact && v1_us > 0) std::printf(" (%.2fx v1)", us / v1_us);
    std::printf("\n");
    if (!compact) v1_us = us;
  }
  return 0;
}
