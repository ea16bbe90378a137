// bench_broker_nats: the embedded broker and two brokers on a three-node JetStream cluster
// (replicas 3), measured in one run on the same machine:
//   - sustained throughput: events/s end to end, unpaced, with nothing lost;
//   - latency at a paced rate (default 10k events/s): consume() (the event's ts_ns, stamped when
//     the agent receives it from the kernel) to the subscriber's receipt, P50/P95/P99.
// Embedded: Forwarder -> mcp-broker (--state-dir, disk journal) -> subscriber on the same broker.
// JetStream: Forwarder -> broker A -> stream (file storage, R3) -> broker B -> subscriber, with
// broker A pipelining publishes (the default, js_PublishMsgAsync) and then synchronous ones.
//   bench_broker_nats [--events 200000] [--rate 10000] [--paced-events 50000]
// Exits 1 when any run lost or duplicated events. Skips (exit 0) without nats-server.
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
#include "nats_cluster.h"
#include "subscribe/subscribe_client.h"

using namespace std::chrono_literals;
using mcp::test::unix_ns;

namespace {

struct Result {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t distinct = 0;
  double events_per_s = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0;
  bool exact() const { return received == sent && distinct == sent; }
};

Result run(const std::string& publish_to, const std::string& subscribe_to, double rate,
           uint64_t events, const std::string& agent_id) {
  std::mutex mu;
  std::vector<uint64_t> latencies;
  std::vector<uint8_t> seen(events, 0);
  latencies.reserve(events);
  std::atomic<uint64_t> received{0};
  uint64_t distinct = 0;
  mcp::SubscribeOptions so;
  so.brokers = {subscribe_to};
  so.service = agent_id;  // each run its own service: earlier runs' events never show up
  mcp::SubscribeClient client(so);
  std::thread sub([&] {
    client.run([&](const mcp::v1::SamplePacket& p) {
      const uint64_t now = unix_ns();
      std::lock_guard lock(mu);
      for (const auto& s : p.samples()) {
        latencies.push_back(now - s.ts_ns());
        const uint64_t i = s.args(0);
        if (i < events && !seen[i]) {
          seen[i] = 1;
          ++distinct;
        }
      }
      received += static_cast<uint64_t>(p.samples_size());
      return true;
    });
  });
  std::this_thread::sleep_for(500ms);

  mcp::ForwarderOptions fo;
  fo.brokers = {publish_to};
  fo.agent_id = agent_id;
  fo.flush_timeout = 120s;
  mcp::Event e;
  e.kind = mcp::EventKind::kSyscall;
  e.probe = "syscall:getppid";
  e.pid = 1;
  e.tid = 1;
  std::strncpy(e.comm.data(), "bench", e.comm.size());
  e.nargs = 1;
  e.service = agent_id;
  const auto start = std::chrono::steady_clock::now();
  {
    mcp::Forwarder fwd(fo);
    for (uint64_t i = 0; i < events; ++i) {
      if (rate > 0) {
        const auto due = start + std::chrono::nanoseconds(static_cast<int64_t>(i * 1e9 / rate));
        while (std::chrono::steady_clock::now() < due) std::this_thread::yield();
      }
      e.args[0] = i;
      e.ts_ns = unix_ns();
      fwd.consume(e);
    }
    fwd.flush_for(120s);
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (received < events && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::this_thread::sleep_for(200ms);  // duplicates would arrive now
  client.stop();
  sub.join();

  Result r;
  r.sent = events;
  r.received = received;
  r.distinct = distinct;
  r.events_per_s = static_cast<double>(std::min(received.load(), events)) / secs;
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double q) {
    return latencies.empty() ? 0.0 : latencies[static_cast<size_t>(q * (latencies.size() - 1))] / 1e6;
  };
  r.p50_ms = pct(0.5);
  r.p95_ms = pct(0.95);
  r.p99_ms = pct(0.99);
  return r;
}

void print(const char* name, const char* mode, const Result& r) {
  std::printf("%-26s %-10s %9.0f ev/s  P50 %7.2f ms  P95 %7.2f ms  P99 %7.2f ms  "
              "received %llu/%llu distinct %llu %s\n",
              name, mode, r.events_per_s, r.p50_ms, r.p95_ms, r.p99_ms,
              static_cast<unsigned long long>(r.received), static_cast<unsigned long long>(r.sent),
              static_cast<unsigned long long>(r.distinct), r.exact() ? "exact" : "LOSS/DUP");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"embedded broker vs two brokers on a three-node JetStream cluster"};
  uint64_t events = 200000;
  double rate = 10000;
  uint64_t paced_events = 50000;
  app.add_option("--events", events, "events for the unpaced throughput runs");
  app.add_option("--rate", rate, "events/s for the latency runs");
  app.add_option("--paced-events", paced_events, "events for the latency runs");
  CLI11_PARSE(app, argc, argv);
  if (mcp::test::nats_server_binary().empty()) {
    std::printf("SKIP: nats-server is not installed\n");
    return 0;
  }

  const auto dir = mcp::test::make_temp_dir("mcp-bench-nats");
  Result embedded_max, embedded_paced, nats_max, nats_paced, sync_max, sync_paced;
  {
    mcp::test::BrokerProcess broker({"--state-dir", (dir / "state").string()}, dir / "embedded.log");
    embedded_max = run(broker.address(), broker.address(), 0, events, "emb-max");
    embedded_paced = run(broker.address(), broker.address(), rate, paced_events, "emb-paced");
    broker.stop(SIGTERM);
  }
  {
    mcp::test::NatsCluster cluster(3, dir / "nats");
    const std::vector<std::string> args{"--backend", cluster.servers(), "--stream-replicas", "3"};
    mcp::test::BrokerProcess a(args, dir / "broker-a.log");
    mcp::test::BrokerProcess b(args, dir / "broker-b.log");
    nats_max = run(a.address(), b.address(), 0, events, "nats-max");
    nats_paced = run(a.address(), b.address(), rate, paced_events, "nats-paced");
    a.stop(SIGTERM);
    // The same cluster, broker A publishing with one synchronous round trip per batch.
    auto sync_args = args;
    sync_args.insert(sync_args.end(), {"--publish-mode", "sync"});
    mcp::test::BrokerProcess a_sync(sync_args, dir / "broker-a-sync.log");
    sync_max = run(a_sync.address(), b.address(), 0, events, "sync-max");
    sync_paced = run(a_sync.address(), b.address(), rate, paced_events, "sync-paced");
    a_sync.stop(SIGTERM);
    b.stop(SIGTERM);
  }
  std::printf("%-26s %-10s\n", "setup", "mode");
  print("embedded (1 broker)", "unpaced", embedded_max);
  print("jetstream (2 brokers, R3)", "unpaced", nats_max);
  print("jetstream, sync publish", "unpaced", sync_max);
  char paced[32];
  std::snprintf(paced, sizeof paced, "%.0f/s", rate);
  print("embedded (1 broker)", paced, embedded_paced);
  print("jetstream (2 brokers, R3)", paced, nats_paced);
  print("jetstream, sync publish", paced, sync_paced);
  std::printf("ratio jetstream/embedded: throughput %.2fx, P95 at %s %.2fx\n",
              nats_max.events_per_s / std::max(1.0, embedded_max.events_per_s), paced,
              nats_paced.p95_ms / std::max(1e-9, embedded_paced.p95_ms));
  std::filesystem::remove_all(dir);
  const bool exact = embedded_max.exact() && embedded_paced.exact() && nats_max.exact() &&
                     nats_paced.exact() && sync_max.exact() && sync_paced.exact();
  return exact ? 0 : 1;
}
