// Issue 51 against a real mcp-broker process on loopback.
// Finding 1: idle TCP connections held until the broker ran out of descriptors left it up,
// /healthz 200, and unreachable for good (gRPC 1.51's listener stops after one accept() EMFILE).
// Finding 5: 20 incarnations sent under another agent's id pushed its dedup marks out, so its
// replay of acked batches was stored twice.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "../../support/prometheus.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::batch_message;
using test::BrokerProcess;
using test::broker_stats;
using test::Collector;
using test::hello_message;
using test::publish_messages;
using test::wait_until;

// A TCP connection to 127.0.0.1:port that sends nothing; -1 when connect() fails.
int idle_connection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One Publish stream (hello + one batch) on a TCP connection of its own: channels in one process
// otherwise share a connection to the same address (gRPC's global subchannel pool), and a new
// connection is what a listener that stopped accepting never serves. The acks received.
size_t publish_on_new_connection(int port, const std::string& agent, uint64_t first_arg,
                                 std::chrono::seconds limit, std::string* error) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + limit);
  const auto stream = test::raw_publish_stream(channel.get(), &ctx);
  for (const auto& m : {hello_message(agent), batch_message(1, 5, first_arg)})
    if (!stream->Write(test::byte_buffer(m.SerializeAsString()))) break;
  stream->WritesDone();
  size_t acks = 0;
  mcp::v1::BrokerMessage reply;
  while (stream->Read(&reply)) acks += reply.has_ack();
  *error = stream->Finish().error_message();
  return acks;
}

// GET /healthz: the status (0: no answer) and body.
std::pair<int, std::string> healthz(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2s);
  client.set_read_timeout(2s);
  auto res = client.Get("/healthz");
  return res ? std::pair{res->status, res->body} : std::pair{0, std::string()};
}

class BrokerAbuse : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("mcp-broker-abuse"); }
  void TearDown() override {
    for (int fd : idle_) ::close(fd);
    std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    std::filesystem::permissions(dir_ / name, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
  std::vector<int> idle_;
};

// Finding 1. The broker's descriptor limit is lowered to 128 (prlimit on the running process, so
// its raise to the hard limit at start cannot undo it), then 300 idle connections are opened.
// The broker must keep descriptors for itself: /healthz answers 503 with the reason, and an agent
// stream opened before the flood is still acked. Once the idle connections close, a new
// publisher's batch is acked and delivered, and /healthz is 200 again.
TEST_F(BrokerAbuse, IdleConnectionsUpToTheDescriptorLimitDoNotStopTheBrokerAccepting) {
  // A handshake deadline longer than the test: the idle connections stay until closed here.
  BrokerProcess broker({"--metrics-listen", "127.0.0.1:0", "--handshake-timeout", "120s"}, dir_ / "broker.log");
  const int metrics = test::metrics_port_in_log(broker.log_text());
  ASSERT_GT(metrics, 0) << broker.log_text();
  Collector collector(test::subscribe_options(broker.address()));
  ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address()).subscribers() == 1; }, 10s));

  auto channel = make_channel(broker.address(), {}, false);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  auto early = test::raw_publish_stream(channel.get(), &ctx);
  mcp::v1::BrokerMessage reply;
  const auto publish_early = [&](uint64_t seq) {
    if (!early->Write(test::byte_buffer(batch_message(seq, 5, seq * 100).SerializeAsString()))) return false;
    while (early->Read(&reply))
      if (reply.has_ack()) return reply.ack().sequence() == seq;
    return false;
  };
  ASSERT_TRUE(early->Write(test::byte_buffer(hello_message("node-early").SerializeAsString())));
  ASSERT_TRUE(publish_early(1));

  const rlimit low{128, 128};
  ASSERT_EQ(::prlimit(broker.pid(), RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);
  for (int i = 0; i < 300; ++i) {
    const int fd = idle_connection(broker.port());
    ASSERT_GE(fd, 0) << "connect " << i << ": " << std::strerror(errno);
    idle_.push_back(fd);
  }
  std::pair<int, std::string> health;
  EXPECT_TRUE(wait_until([&] { return (health = healthz(metrics)).first == 503; }, 15s))
      << "/healthz answered " << health.first << " '" << health.second << "' with the listener's descriptors gone\n"
      << broker.log_text();
  EXPECT_NE(health.second.find("connection"), std::string::npos) << health.second;
  EXPECT_TRUE(publish_early(2)) << "a stream opened before the flood was not acked during it";

  for (int fd : idle_) ::close(fd);
  idle_.clear();
  std::string error;
  EXPECT_TRUE(wait_until([&] { return publish_on_new_connection(broker.port(), "node-late", 1000, 2s, &error) == 1; }, 20s))
      << "a new publisher is still refused after the idle connections closed: " << error << "\n" << broker.log_text();
  // Every new connection, not some.
  for (uint64_t agent = 0; agent < 4; ++agent)
    EXPECT_EQ(publish_on_new_connection(broker.port(), "node-late-" + std::to_string(agent), 2000 + agent * 5, 5s, &error), 1u)
        << "new publisher " << agent << ": " << error;
  EXPECT_TRUE(wait_until([&] { return collector.distinct() == 35; }, 10s)) << collector.distinct() << " of 35";
  EXPECT_TRUE(wait_until([&] { return healthz(metrics).first == 200; }, 10s)) << healthz(metrics).second;
  early->WritesDone();
  while (early->Read(&reply)) {
  }
  early->Finish();
}

// Finding 1: a connection that never sends its HTTP/2 preface is closed at --handshake-timeout
// (gRPC's default was 120 s).
TEST_F(BrokerAbuse, AConnectionThatSendsNothingIsClosedAtTheHandshakeTimeout) {
  BrokerProcess broker({"--handshake-timeout", "1s"}, dir_ / "broker.log");
  const int fd = idle_connection(broker.port());
  ASSERT_GE(fd, 0);
  idle_.push_back(fd);
  // The broker may send its HTTP/2 settings first; then it must close the connection.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    char buf[256];
    closed = ::recv(fd, buf, sizeof buf, 0) <= 0;
  }
  EXPECT_TRUE(closed) << "the broker still holds a silent connection after 10 s";
}

// Finding 5. The victim publishes 5 batches under its incarnation, the attacker then sends 20
// other incarnations under the victim's id, and the victim replays the 5 acked batches (acks
// lost). Each victim event must be stored once. With a credential of its own the attacker is
// refused outright (the id is bound to the victim's); sharing the victim's credential (here: no
// authentication, so every local user) it may add incarnations only while fewer than 16 are in
// use, never evict the victim's.
TEST_F(BrokerAbuse, IncarnationsSentUnderAnotherAgentsIdDoNotMakeItsReplayADuplicate) {
  for (const bool tokens : {true, false}) {
    SCOPED_TRACE(tokens ? "attacker has its own token" : "no authentication: one credential for all");
    std::vector<std::string> args;
    std::string victim_token, attacker_token, sub_token_file;
    if (tokens) {
      args = {"--token-file", write("tokens", "publish victim\npublish attacker\nsubscribe sub\n")};
      victim_token = "victim";
      attacker_token = "attacker";
      sub_token_file = write("sub", "sub\n");
    }
    BrokerProcess broker(args, dir_ / (tokens ? "tokens.log" : "open.log"));
    SubscribeOptions so = test::subscribe_options(broker.address());
    so.token_file = sub_token_file;
    Collector collector(so);
    ASSERT_TRUE(wait_until([&] { return broker_stats(broker.address(), tokens ? "sub" : "").subscribers() == 1; }, 10s));

    constexpr uint64_t kVictim = 0x7777;
    std::vector<mcp::v1::AgentMessage> batches{hello_message("node-victim", kVictim)};
    for (uint64_t seq = 1; seq <= 5; ++seq) batches.push_back(batch_message(seq, 5, seq * 10));
    auto sent = publish_messages(broker.address(), batches, victim_token);
    ASSERT_EQ(sent.acks.size(), 5u) << sent.status.error_message();

    int refused = 0;
    for (uint64_t inc = 1; inc <= 20; ++inc) {
      auto forged = publish_messages(broker.address(),
                                     {hello_message("node-victim", inc), batch_message(1, 1, 100000 + inc)}, attacker_token);
      if (forged.status.ok()) continue;
      ++refused;
      EXPECT_TRUE(forged.acks.empty());
      EXPECT_TRUE(forged.status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                  forged.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
          << forged.status.error_message();
    }
    EXPECT_EQ(refused, tokens ? 20 : 5) << "15 incarnations fill the 16 an agent id holds; later ones are refused";

    auto replay = publish_messages(broker.address(), batches, victim_token);
    ASSERT_EQ(replay.acks.size(), 5u) << replay.status.error_message();
    for (const auto& ack : replay.acks) EXPECT_TRUE(ack.duplicate()) << "batch " << ack.sequence() << " stored twice";

    // An end marker: everything stored before it has reached the subscriber once it has.
    auto marker = publish_messages(broker.address(), {hello_message("node-marker"), batch_message(1, 1, 999999)},
                                   victim_token);
    ASSERT_EQ(marker.acks.size(), 1u) << marker.status.error_message();
    const auto has_marker = [&] {
      for (const auto& s : collector.samples())
        if (s.args(0) == 999999) return true;
      return false;
    };
    ASSERT_TRUE(wait_until(has_marker, 10s));
    std::map<uint64_t, int> victim_events;
    for (const auto& s : collector.samples())
      if (s.agent_id() == "node-victim" && s.args(0) < 100000) ++victim_events[s.args(0)];
    EXPECT_EQ(victim_events.size(), 25u);
    for (const auto& [arg, n] : victim_events) EXPECT_EQ(n, 1) << "event " << arg << " stored " << n << " times";
  }
}

}  // namespace
}  // namespace mcp
