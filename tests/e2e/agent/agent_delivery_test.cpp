// Nothing lost silently (issue 14): the real mcp-agent binary, real BPF, a real mcp-broker
// process (or a listener that never answers), and the broker's own counts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <future>
#include <regex>

#include "../../support/process.h"
#include "spool/segment_log.h"
#include "../../support/run_command.h"
#include "../../support/broker_client.h"
#include "../../support/broker_process.h"

namespace mcp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::BlackholeListener;
using test::BrokerProcess;
using test::Process;
using test::run_command;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

uint64_t broker_events(const std::string& address, const std::string& service, const std::string& probe) {
  uint64_t n = 0;
  const auto stats = test::broker_stats(address);  // probes() refers into it
  for (const auto& p : stats.probes())
    if (p.service() == service && p.probe() == probe) n += p.events();
  return n;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  stat(p.c_str(), &st);
  return st.st_mode & 07777;
}

class AgentDelivery : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    dir_ = test::make_temp_dir("mcp-delivery");
  }
  void TearDown() override {
    broker_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  BrokerProcess& broker() {
    if (!broker_) broker_ = std::make_unique<BrokerProcess>(std::vector<std::string>{}, dir_ / "broker.log");
    return *broker_;
  }

  fs::path dir_;
  std::unique_ptr<BrokerProcess> broker_;
};

// Item 1: a thread names itself with invalid UTF-8; the batches it shares with another
// thread's events must still be readable, so every kept event reaches the subscriber.
TEST_F(AgentDelivery, InvalidUtf8CommDoesNotPoisonOtherProcessesEvents) {
  constexpr int kCalls = 3000;
  SubscribeOptions so;
  so.brokers = {broker().address()};
  so.service = "badcomm";
  test::Collector sub(so);
  ASSERT_TRUE(test::wait_until([&] { return test::broker_stats(broker().address()).subscribers() == 1; }, 10s));

  auto r = run_command({kAgent, "trace", "-s", "getppid", "--broker", broker().address(), "--service", "badcomm", "--",
                        kWorkload, "badcomm", std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = test::parse_summary(r.err);
  ASSERT_TRUE(rows.count("syscall:getppid")) << r.err;
  const uint64_t kept = rows.at("syscall:getppid").kept;
  EXPECT_EQ(kept, 2u * kCalls) << "both threads' calls are kept";
  EXPECT_NE(r.err.find("acked " + std::to_string(kept) + ", "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unreadable 0,"), std::string::npos) << r.err;

  EXPECT_EQ(broker_events(broker().address(), "badcomm", "syscall:getppid"), kept);
  ASSERT_TRUE(test::wait_until([&] { return sub.count() >= kept; }, 20s)) << sub.count() << " of " << kept;
  size_t replaced = 0, plain = 0;
  for (const auto& s : sub.samples()) {
    if (s.comm() == "\xef\xbf\xbd\xef\xbf\xbd") replaced++;
    if (s.comm() == "mcp-workload") plain++;
  }
  EXPECT_EQ(replaced, static_cast<size_t>(kCalls)) << "the bad name arrives as two U+FFFD";
  EXPECT_EQ(plain, static_cast<size_t>(kCalls)) << "the neighbour's events all arrive";
}

// Item 1: a spooled batch that does not parse back (a record with a good checksum around bytes
// that are no Batch) is counted, reported and released, never silently skipped.
TEST_F(AgentDelivery, UnreadableSpooledBatchIsCountedAndReported) {
  const fs::path spool = dir_ / "spool";
  { SegmentLog(SegmentLogOptions{spool}).append("\xff not a batch", 42); }
  ForwarderOptions fo;
  fo.brokers = {broker().address()};
  fo.spool_dir = spool;
  Forwarder forwarder(fo);
  ASSERT_TRUE(forwarder.flush_for(10s)) << "the unreadable batch must not hold the flush";
  const auto s = forwarder.stats();
  EXPECT_EQ(s.unreadable_batches, 1u);
  EXPECT_EQ(s.unreadable_events, 42u);
  EXPECT_EQ(undelivered_of(s).describe(),
            "42 events undelivered: 42 lost during the run (full queue or spool, or unreadable batches)");
}

// Item 2: a broker that accepts TCP but never speaks gRPC. The run says how many events did
// not arrive, that they are gone (no spool directory), and fails.
TEST_F(AgentDelivery, TraceToASilentBrokerReportsTheLostEventsAndExitsOne) {
  BlackholeListener blackhole;
  auto r = run_command(
      {kAgent, "trace", "-s", "getppid", "--broker", blackhole.address(), "--", kWorkload, "getppid", "200"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mcp-agent: 200 events undelivered: 200 lost with the in-memory spool (no spool directory)"),
            std::string::npos)
      << r.err;
}

// Item 2 with --spool-dir: the events are on disk (owner-only), the message says where, and a
// later run against a live broker delivers them.
TEST_F(AgentDelivery, UndeliveredEventsKeptInTheSpoolAreSentByTheNextRun) {
  const fs::path spool = dir_ / "spool";
  {
    BlackholeListener blackhole;
    auto r = run_command({kAgent, "trace", "-s", "getppid", "--broker", blackhole.address(), "--spool-dir",
                          spool.string(), "--", kWorkload, "getppid", "150"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("150 events undelivered: 150 kept in the spool " + spool.string()), std::string::npos)
        << r.err;
  }
  EXPECT_EQ(mode_of(spool), 0700u);
  size_t segments = 0;
  for (const auto& e : fs::directory_iterator(spool)) {
    if (e.path().extension() != ".seg") continue;
    segments++;
    EXPECT_EQ(mode_of(e.path()), 0600u) << e.path();
  }
  EXPECT_GT(segments, 0u);

  auto r = run_command({kAgent, "trace", "-s", "getppid", "--broker", broker().address(), "--spool-dir",
                        spool.string(), "--", kWorkload, "getppid", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(broker_events(broker().address(), "", "syscall:getppid"), 200u) << "150 replayed + 50 new";
}

// Item 2: a second SIGINT ends the wait for the broker at once (the wait is otherwise 10 s).
TEST_F(AgentDelivery, SecondSigintEndsTheWaitForTheBroker) {
  BlackholeListener blackhole;
  Process agent({kAgent, "trace", "-s", "getppid", "--broker", blackhole.address(), "--", kWorkload, "getppid", "100"},
                dir_, "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("waiting up to 10 s for the broker"), 30s)) << agent.err();
  agent.signal(SIGINT);
  const auto rc = agent.wait(5s);
  ASSERT_TRUE(rc.has_value()) << "still waiting after a second SIGINT: " << agent.err();
  EXPECT_EQ(*rc, 1);
  EXPECT_NE(agent.err().find("100 events undelivered"), std::string::npos) << agent.err();
}

// Item 3: two runs on one host at once. With a shared default id the broker took one run's
// batches for replays of the other's; each run's kept events must all be stored.
TEST_F(AgentDelivery, TwoConcurrentTracesAreBothDeliveredInFull) {
  auto run = [&](const std::string& service) {
    return std::async(std::launch::async, [=, address = broker().address()] {
      return run_command({kAgent, "trace", "-s", "getppid", "--broker", address, "--service", service, "--", kWorkload,
                          "rate", "4000", "2", "getppid"});
    });
  };
  auto a = run("run-a");
  auto b = run("run-b");
  const auto ra = a.get(), rb = b.get();
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  const uint64_t kept_a = test::parse_summary(ra.err).at("syscall:getppid").kept;
  const uint64_t kept_b = test::parse_summary(rb.err).at("syscall:getppid").kept;
  EXPECT_GT(kept_a, 1000u);
  EXPECT_GT(kept_b, 1000u);
  EXPECT_EQ(broker_events(broker().address(), "run-a", "syscall:getppid"), kept_a);
  EXPECT_EQ(broker_events(broker().address(), "run-b", "syscall:getppid"), kept_b);
  EXPECT_EQ(test::broker_stats(broker().address()).duplicate_batches(), 0u);
}

std::string daemon_config(const fs::path& dir, const std::string& broker) {
  const fs::path file = dir / "agent.yaml";
  std::ofstream(file) << "metrics:\n  listen: 127.0.0.1:0\nbroker:\n  addresses: [\"" << broker
                      << "\"]\nsyscalls:\n  - name: getppid\n";
  return file.string();
}

// Item 2 for the daemon: SIGTERM waits the documented 10 s for a silent broker, once, and
// without a state directory says how many events are lost (and exits 1) instead of claiming
// they stay in a spool.
TEST_F(AgentDelivery, DaemonWithoutStateDirectoryReportsLostEventsOnSigterm) {
  BlackholeListener blackhole;
  Process daemon({kAgent, "run", "--config", daemon_config(dir_, blackhole.address())}, dir_, "daemon");
  ASSERT_TRUE(daemon.wait_for_err(std::regex("mcp-agent running"), 30s)) << daemon.err();
  ASSERT_EQ(run_command({kWorkload, "getppid", "100"}).exit_code, 0);
  const auto start = std::chrono::steady_clock::now();
  daemon.signal(SIGTERM);
  const auto rc = daemon.wait(30s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 1) << daemon.err();
  EXPECT_LT(took, 15s) << "the drain waits 10 s, not twice that";
  std::smatch m;
  const std::string log = daemon.err();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("([0-9]+) events undelivered: [0-9]+ lost with the in-memory spool")))
      << log;
  EXPECT_GE(std::stoull(m[1]), 100u);
  EXPECT_EQ(log.find("stays in the spool"), std::string::npos) << log;
}

// Item 3 for the daemon: with a state directory its id is stored there (owner-only) and is the
// same after a restart, so the broker deduplicates its spool replays.
TEST_F(AgentDelivery, DaemonKeepsItsAgentIdAcrossRestarts) {
  const fs::path state = dir_ / "state";
  fs::create_directories(state);
  const std::string config = daemon_config(dir_, broker().address());
  auto start = [&](const std::string& name) {
    Process daemon({kAgent, "run", "--config", config}, dir_, name, {"STATE_DIRECTORY=" + state.string()});
    std::smatch m;
    EXPECT_TRUE(daemon.wait_for_err(std::regex("as agent (\\S+)"), 30s, &m)) << daemon.err();
    const std::string id = m.empty() ? "" : m[1].str();
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(30s), std::optional<int>(0)) << daemon.err();
    return id;
  };
  const std::string first = start("daemon1");
  const std::string second = start("daemon2");
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, second);
  EXPECT_EQ(test::slurp((state / "agent-id").string()), first + "\n");
  EXPECT_EQ(mode_of(state / "agent-id"), 0600u);
}

}  // namespace
}  // namespace mcp
