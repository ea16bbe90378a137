// bench_broker_e2e: events/s through Forwarder -> mcp-broker -> subscriber with nothing lost,
// and latency from consume() (the event's ts_ns) to the subscriber's receipt, at a paced rate.
//   bench_broker_e2e [--rate 10000] [--events 50000] [--spool DIR]
// rate 0 = as fast as possible (throughput); prints P50/P95/P99 and loss.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "broker_client.h"
#include "broker_process.h"
#include "forward/forwarder.h"
#include "subscribe/subscribe_client.h"

using namespace std::chrono_literals;
using mcp::test::unix_ns;

int main(int argc, char** argv) {
  CLI::App app{"broker end-to-end benchmark"};
  double rate = 10000;
  uint64_t events = 50000;
  std::string spool;
  app.add_option("--rate", rate, "events/s to offer (0: unpaced)");
  app.add_option("--events", events, "events to send");
  app.add_option("--spool", spool, "forwarder spool directory (default: memory)");
  CLI11_PARSE(app, argc, argv);

  const auto dir = mcp::test::make_temp_dir("mcp-bench-broker");
  mcp::test::BrokerProcess broker({"--state-dir", (dir / "state").string()}, dir / "broker.log");

  std::mutex mu;
  std::vector<uint64_t> latencies;
  latencies.reserve(events);
  std::atomic<uint64_t> received{0};
  mcp::SubscribeOptions so;
  so.brokers = {broker.address()};
  mcp::SubscribeClient client(so);
  std::thread sub([&] {
    client.run([&](const mcp::v1::SamplePacket& p) {
      const uint64_t now = unix_ns();
      std::lock_guard lock(mu);
      for (const auto& s : p.samples()) latencies.push_back(now - s.ts_ns());
      received += static_cast<uint64_t>(p.samples_size());
      return true;
    });
  });
  std::this_thread::sleep_for(300ms);

  mcp::ForwarderOptions fo;
  fo.brokers = {broker.address()};
  fo.agent_id = "bench";
  fo.spool_dir = spool;
  mcp::Forwarder fwd(fo);
  mcp::Event e;
  e.kind = mcp::EventKind::kSyscall;
  e.probe = "syscall:getppid";
  e.pid = 1;
  e.tid = 1;
  std::strncpy(e.comm.data(), "bench", e.comm.size());
  e.nargs = 1;
  e.service = "bench";
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < events; ++i) {
    if (rate > 0) {
      const auto due = start + std::chrono::nanoseconds(static_cast<int64_t>(i * 1e9 / rate));
      while (std::chrono::steady_clock::now() < due) std::this_thread::yield();
    }
    e.args[0] = i;
    e.ts_ns = unix_ns();
    fwd.consume(e);
  }
  const bool flushed = fwd.flush_for(60s);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (received < events && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  client.stop();
  sub.join();

  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double q) {
    return latencies.empty() ? 0.0 : latencies[static_cast<size_t>(q * (latencies.size() - 1))] / 1e6;
  };
  const auto fs = fwd.stats();
  std::printf("offered %.0f ev/s, %llu events: received %llu (lost %lld), flushed %s\n", rate,
              static_cast<unsigned long long>(events), static_cast<unsigned long long>(received.load()),
              static_cast<long long>(events) - static_cast<long long>(received.load()),
              flushed ? "yes" : "no");
  std::printf("throughput %.0f ev/s end to end; latency ms P50 %.2f P95 %.2f P99 %.2f; "
              "forwarder dropped %llu, reconnects %llu\n",
              received / secs, pct(0.5), pct(0.95), pct(0.99),
              static_cast<unsigned long long>(fs.dropped_oldest),
              static_cast<unsigned long long>(fs.reconnects));
  broker.stop(SIGTERM);
  std::filesystem::remove_all(dir);
  return received == events ? 0 : 1;
}
