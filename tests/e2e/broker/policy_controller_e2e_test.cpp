// The SamplingPolicy controller end to end: a real mcp-broker process run with --k8s-policies
// against the fake API server (tests/support/fake_apiserver.h: list, watch with
// ADDED/MODIFIED/DELETED/BOOKMARK, 410 Gone, dropped connections, the status subresource over
// TLS), an agent's Forwarder connected to it receiving the pushed policies, ListPolicies and
// the status writes the server recorded as the observable results.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <fstream>
#include <optional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "../../support/fake_apiserver.h"
#include "../../support/broker_client.h"
#include "../../support/broker_process.h"
#include "forward/forwarder.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::BrokerProcess;
using test::FakeApiServer;
using test::stub_for;
using test::wait_until;

std::vector<mcp::v1::Policy> list_policies(const std::string& address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  mcp::v1::PolicyList reply;
  stub_for(address)->ListPolicies(&ctx, {}, &reply);
  return {reply.policies().begin(), reply.policies().end()};
}

// The broker's policy of (service, probe) without a trace-id prefix, or nullopt.
std::optional<mcp::v1::Policy> policy_of(const std::string& address, const std::string& service,
                                         const std::string& probe = "") {
  for (const auto& p : list_policies(address))
    if (p.service() == service && p.probe() == probe && p.trace_id_prefix().empty()) return p;
  return std::nullopt;
}

class PolicyControllerE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
    dir_ = test::make_temp_dir("mcp-policyctl-e2e");
    api_ = std::make_unique<FakeApiServer>(dir_ / "api");
  }
  void TearDown() override {
    forwarder_.reset();
    broker_.reset();
    api_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void start_broker(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--k8s-policies", "--k8s-api-server", api_->url(), "--k8s-token-file",
                                  api_->token_file(), "--k8s-ca-file", api_->ca_file(), "--k8s-qps-window", "1s"};
    args.insert(args.end(), extra.begin(), extra.end());
    broker_ = std::make_unique<BrokerProcess>(args, dir_ / "broker.log");
  }
  // An agent's forwarder, connected, recording every policy pushed to it.
  void connect_agent() {
    ForwarderOptions o;
    o.brokers = {broker_->address()};
    o.agent_id = "policy-agent";
    o.backoff_initial = 50ms;
    o.backoff_max = 200ms;
    o.flush_timeout = 20s;
    o.on_policy = [this](const PolicyUpdate& p) {
      std::lock_guard lk(mu_);
      pushes_.push_back(p);
    };
    forwarder_ = std::make_unique<Forwarder>(o);
    Event e;
    e.ts_ns = 1'700'000'000'000'000'000ull;
    e.kind = EventKind::kUprobe;
    e.probe = "/usr/bin/worker:handle_request";
    std::strncpy(e.comm.data(), "worker", e.comm.size());
    forwarder_->consume(e);
    ASSERT_TRUE(forwarder_->flush_for(10s));  // connected and acknowledged
  }
  std::vector<PolicyUpdate> pushes() {
    std::lock_guard lk(mu_);
    return pushes_;
  }
  bool pushed(const std::string& service, double rate) {
    for (const auto& p : pushes())
      if (p.service == service && p.sampling_rate == rate && !p.removed) return true;
    return false;
  }
  bool removed(const std::string& service, const std::string& probe = "") {
    for (const auto& p : pushes())
      if (p.service == service && p.probe == probe && p.removed) return true;
    return false;
  }
  // The last status the controller wrote for NS/NAME, as the server stores it.
  json status_of(const std::string& name, const std::string& ns = "default") {
    const json p = api_->policy(ns, name);
    return p.is_null() ? json() : p.value("status", json());
  }
  std::string reason_of(const std::string& name, const std::string& ns = "default") {
    const json s = status_of(name, ns);
    return s.is_object() && s.contains("conditions") ? s["conditions"][0].value("reason", "") : "";
  }
  bool status_is(const std::string& name, int64_t generation, const std::string& reason) {
    const json s = status_of(name);
    return s.is_object() && s.value("observedGeneration", int64_t{-1}) == generation &&
           s["conditions"][0].value("reason", "") == reason;
  }
  int lists() const {
    int n = 0;
    for (const auto& r : api_->requests())
      if (r.path == kPolicies && !r.watch()) n++;
    return n;
  }
  std::string log() const {
    std::ifstream in(dir_ / "broker.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  static constexpr const char* kPolicies = "/apis/sampling.mcp.dev/v1alpha1/samplingpolicies";
  std::filesystem::path dir_;
  std::unique_ptr<FakeApiServer> api_;
  std::unique_ptr<BrokerProcess> broker_;
  std::unique_ptr<Forwarder> forwarder_;
  std::mutex mu_;
  std::vector<PolicyUpdate> pushes_;
};

TEST_F(PolicyControllerE2E, ObjectsAddedModifiedAndDeletedBecomeTheBrokersPoliciesWithStatus) {
  // Listed at start.
  api_->put_policy(FakeApiServer::make_policy("default", "checkout", {{"service", "checkout"}, {"samplingRate", 0.5}}));
  start_broker();
  ASSERT_TRUE(wait_until([&] { return policy_of(broker_->address(), "checkout").has_value(); }, 10s)) << log();
  const auto p = *policy_of(broker_->address(), "checkout");
  EXPECT_EQ(p.sampling_rate(), 0.5);
  EXPECT_EQ(p.source(), "SamplingPolicy default/checkout");
  ASSERT_TRUE(wait_until([&] { return status_is("checkout", 1, "Applied"); }, 10s)) << status_of("checkout");
  EXPECT_EQ(status_of("checkout")["conditions"][0]["status"], "True");
  EXPECT_EQ(status_of("checkout")["active"], true);

  connect_agent();  // a later agent gets the broker's policies on connect
  ASSERT_TRUE(wait_until([&] { return pushed("checkout", 0.5); }, 10s));

  // Added through the watch, with serviceLabels carried into the policy and to the agent.
  api_->put_policy(FakeApiServer::make_policy(
      "shop", "cart", {{"service", "cart"}, {"probe", "syscall"}, {"samplingRate", 0.1},
                       {"serviceLabels", {{"version", "v2"}}}}));
  ASSERT_TRUE(wait_until([&] { return policy_of(broker_->address(), "cart", "syscall").has_value(); }, 10s)) << log();
  const auto cart = *policy_of(broker_->address(), "cart", "syscall");
  EXPECT_EQ(cart.service_labels().at("version"), "v2");
  ASSERT_TRUE(wait_until([&] { return pushed("cart", 0.1); }, 10s)) << "the connected agent was not told";
  for (const auto& u : pushes())
    if (u.service == "cart") EXPECT_EQ(u.service_labels, (std::map<std::string, std::string>{{"version", "v2"}}));
  EXPECT_TRUE(wait_until([&] { const json st = status_of("cart", "shop");
                              return st.is_object() && st.value("appliedAgents", 0) == 1; }, 10s))
      << api_->policy("shop", "cart").dump();

  // Modified: the policy follows, the status follows the generation.
  api_->put_policy(FakeApiServer::make_policy("default", "checkout", {{"service", "checkout"}, {"samplingRate", 0.25}}));
  ASSERT_TRUE(wait_until([&] { return policy_of(broker_->address(), "checkout")->sampling_rate() == 0.25; }, 10s));
  EXPECT_TRUE(wait_until([&] { return pushed("checkout", 0.25); }, 10s));
  EXPECT_TRUE(wait_until([&] { return status_is("checkout", 2, "Applied"); }, 10s)) << status_of("checkout");

  // A status write is itself a MODIFIED event: it must not cause another write (no loop).
  // marker2 comes after marker's status MODIFIED in the stream, so once it is handled an echo
  // of marker's would have been too. A bookmark on the way changes nothing.
  const size_t writes = api_->status_writes().size();
  api_->put_policy(FakeApiServer::make_policy("default", "marker", {{"service", "marker"}, {"samplingRate", 1}}));
  ASSERT_TRUE(wait_until([&] { return status_is("marker", 1, "Applied"); }, 10s));
  api_->bookmark();
  api_->put_policy(FakeApiServer::make_policy("default", "marker2", {{"service", "marker2"}, {"samplingRate", 1}}));
  ASSERT_TRUE(wait_until([&] { return status_is("marker2", 1, "Applied"); }, 10s));
  EXPECT_EQ(api_->status_writes().size(), writes + 2) << "status writes echo their own MODIFIED events";

  // Deleted: the policy goes, and the connected agent is told so.
  api_->delete_policy("default", "checkout");
  ASSERT_TRUE(wait_until([&] { return !policy_of(broker_->address(), "checkout").has_value(); }, 10s));
  EXPECT_TRUE(policy_of(broker_->address(), "cart", "syscall").has_value());
  ASSERT_TRUE(wait_until([&] { return removed("checkout"); }, 10s)) << "the agent was not told of the removal";
  EXPECT_FALSE(removed("cart"));
  for (const auto& w : api_->status_writes()) {
    EXPECT_EQ(w.method, "PATCH");
    EXPECT_EQ(w.status, 200) << w.body;
  }
}

TEST_F(PolicyControllerE2E, AnInvalidObjectGetsAStatusErrorAndLeavesPoliciesInForce) {
  api_->put_policy(FakeApiServer::make_policy("default", "checkout", {{"service", "checkout"}, {"samplingRate", 0.5}}));
  start_broker();
  ASSERT_TRUE(wait_until([&] { return status_is("checkout", 1, "Applied"); }, 10s)) << log();

  // A new object the broker cannot apply: no policy, the reason in its status.
  api_->put_policy(FakeApiServer::make_policy("default", "bad", {{"service", "bad"}, {"samplingRate", 0.5},
                                                                  {"traceIdPrefix", "xyz"}}));
  ASSERT_TRUE(wait_until([&] { return status_is("bad", 1, "Invalid"); }, 10s)) << status_of("bad");
  EXPECT_NE(status_of("bad")["message"].get<std::string>().find("trace_id_prefix"), std::string::npos);
  EXPECT_EQ(status_of("bad")["active"], false);
  EXPECT_FALSE(policy_of(broker_->address(), "bad").has_value());

  // A bad new generation of a good object: its previous policy stays.
  api_->put_policy(FakeApiServer::make_policy("default", "checkout", {{"service", "checkout"}, {"samplingRate", 0.2},
                                                                       {"strategy", "weighted"}, {"weights", {{"v1", 100}}}}));
  ASSERT_TRUE(wait_until([&] { return status_is("checkout", 2, "Invalid"); }, 10s)) << status_of("checkout");
  EXPECT_NE(status_of("checkout")["message"].get<std::string>().find("earlier generation stays in force"),
            std::string::npos);
  EXPECT_EQ(policy_of(broker_->address(), "checkout")->sampling_rate(), 0.5);

  // A trace-id prefix rule is a policy of its own, keyed with its prefix (lowercase), beside
  // the plain policy of its service: no conflict with it.
  api_->put_policy(FakeApiServer::make_policy("default", "canary", {{"service", "checkout"}, {"samplingRate", 1},
                                                                     {"traceIdPrefix", "00AB"}}));
  ASSERT_TRUE(wait_until([&] { return status_is("canary", 1, "Applied"); }, 10s)) << status_of("canary");
  ASSERT_EQ(list_policies(broker_->address()).size(), 2u);
  EXPECT_EQ(list_policies(broker_->address())[1].trace_id_prefix(), "00ab");
  EXPECT_EQ(policy_of(broker_->address(), "checkout")->sampling_rate(), 0.5) << "the plain policy stays";
  api_->delete_policy("default", "canary");
  ASSERT_TRUE(wait_until([&] { return list_policies(broker_->address()).size() == 1; }, 10s));

  // A second object for a (service, probe) another holds: refused, the holder's policy stays.
  api_->put_policy(FakeApiServer::make_policy("other", "checkout-too", {{"service", "checkout"}, {"samplingRate", 0.9}}));
  ASSERT_TRUE(wait_until([&] { return reason_of("checkout-too", "other") == "Conflict"; }, 10s))
      << status_of("checkout-too", "other");
  EXPECT_EQ(policy_of(broker_->address(), "checkout")->sampling_rate(), 0.5);
  EXPECT_EQ(list_policies(broker_->address()).size(), 1u);
}

TEST_F(PolicyControllerE2E, GoneRelistsWithoutLosingOrDuplicatingPolicies) {
  api_->set_gone_as(FakeApiServer::GoneAs::kErrorEvent);
  api_->put_policy(FakeApiServer::make_policy("default", "a", {{"service", "a"}, {"samplingRate", 0.5}}));
  api_->put_policy(FakeApiServer::make_policy("default", "b", {{"service", "b"}, {"samplingRate", 0.5}}));
  start_broker();
  // Connected once both are in: the agent gets each exactly once, on connect.
  ASSERT_TRUE(wait_until([&] { return list_policies(broker_->address()).size() == 2; }, 10s)) << log();
  connect_agent();
  ASSERT_TRUE(wait_until([&] { return pushed("a", 0.5) && pushed("b", 0.5); }, 10s)) << log();
  ASSERT_TRUE(wait_until([&] { return api_->open_watches() == 1; }, 10s));
  ASSERT_EQ(lists(), 1);

  // The watch drops; while it is away b is deleted, c added, and the history compacted: the
  // rewatch from the old version gets 410, and only a new list can tell what happened.
  api_->drop_watches();
  api_->delete_policy("default", "b");
  api_->put_policy(FakeApiServer::make_policy("default", "c", {{"service", "c"}, {"samplingRate", 0.5}}));
  api_->compact();
  ASSERT_TRUE(wait_until([&] { return policy_of(broker_->address(), "c").has_value(); }, 15s)) << log();
  ASSERT_TRUE(wait_until([&] { return !policy_of(broker_->address(), "b").has_value(); }, 10s)) << log();
  EXPECT_GE(lists(), 2) << "no relist: the watch saw the changes itself";
  EXPECT_TRUE(policy_of(broker_->address(), "a").has_value()) << "the relist lost a";
  EXPECT_EQ(list_policies(broker_->address()).size(), 2u);
  ASSERT_TRUE(wait_until([&] { return pushed("c", 0.5); }, 10s));
  int a_pushes = 0;
  for (const auto& p : pushes()) a_pushes += p.service == "a" ? 1 : 0;
  EXPECT_EQ(a_pushes, 1) << "the relist applied the unchanged object again";
}

TEST_F(PolicyControllerE2E, QpsThresholdAppliesWhileTheServiceIsAboveItAndNotBelow) {
  api_->put_policy(FakeApiServer::make_policy(
      "default", "busy", {{"service", "checkout"}, {"samplingRate", 0.1}, {"qpsThreshold", 200}}));
  start_broker();
  ASSERT_TRUE(wait_until([&] { return status_is("busy", 1, "BelowQpsThreshold"); }, 10s)) << log();
  EXPECT_FALSE(policy_of(broker_->address(), "checkout").has_value());

  // Publish well above 200 events/s (weight 1 each) until the policy is in force.
  uint64_t seq = 1;
  auto publish_until = [&](const std::function<bool()>& done, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < end) {
      std::vector<mcp::v1::AgentMessage> msgs{test::hello_message("load")};
      for (int i = 0; i < 5; ++i, ++seq) msgs.push_back(test::batch_message(seq, 200, seq * 1000));
      test::publish_messages(broker_->address(), msgs);
    }
    return done();
  };
  ASSERT_TRUE(publish_until([&] { return policy_of(broker_->address(), "checkout").has_value(); }, 20s)) << log();
  EXPECT_TRUE(wait_until([&] { return status_is("busy", 1, "Applied"); }, 10s)) << status_of("busy");
  EXPECT_GT(status_of("busy").value("observedQps", 0.0), 200);

  // Quiet: the rate over the window falls to 0, the policy goes.
  ASSERT_TRUE(wait_until([&] { return !policy_of(broker_->address(), "checkout").has_value(); }, 15s)) << log();
  EXPECT_TRUE(wait_until([&] { return status_is("busy", 1, "BelowQpsThreshold"); }, 10s)) << status_of("busy");
  EXPECT_EQ(status_of("busy")["active"], false);
}

// Issue 29: with one publish token shared by every agent (the Kubernetes setup), the broker's
// id bindings could not tell agents apart: any agent could publish as any other. With
// --agent-token-review each agent presents its own pod's ServiceAccount token; a TokenReview
// says which node it runs on, and it may publish only as that node's agent id.
TEST_F(PolicyControllerE2E, AgentsPublishWithTheirPodsTokenOnlyAsTheirNode) {
  const std::string agents = "system:serviceaccount:mcp-system:mcp-agent";
  api_->add_pod_token("pod-token-a", agents, "node-a", "mcp-broker");
  api_->add_pod_token("pod-token-b", agents, "node-b", "mcp-broker");
  api_->add_pod_token("web-token", "system:serviceaccount:default:web", "node-a", "mcp-broker");
  api_->add_pod_token("vault-token", agents, "node-a", "vault");
  broker_ = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--agent-token-review", "--k8s-api-server", api_->url(), "--k8s-token-file",
                               api_->token_file(), "--k8s-ca-file", api_->ca_file()},
      dir_ / "broker.log");
  const std::string address = broker_->address();
  for (int i = 0; i < 2; ++i) {
    auto mine = test::publish_messages(address, {test::hello_message("node-a"), test::batch_message(1 + i, 1, i)},
                                       "pod-token-a");
    ASSERT_EQ(mine.acks.size(), 1u) << mine.status.error_message() << "\n" << log();
  }
  auto as_other = test::publish_messages(address, {test::hello_message("node-a"), test::batch_message(9, 1)},
                                         "pod-token-b");
  EXPECT_EQ(as_other.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(as_other.status.error_message().find("only as agent id 'node-b'"), std::string::npos)
      << as_other.status.error_message();
  EXPECT_TRUE(as_other.acks.empty());
  for (const char* token : {"web-token", "vault-token", "forged"}) {
    auto r = test::publish_messages(address, {test::hello_message("node-a"), test::batch_message(9, 1)}, token);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
  }
  // A publisher's token is no subscriber's.
  {
    grpc::ClientContext ctx;
    add_token(ctx, "pod-token-a");
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto reader = stub_for(address)->Subscribe(&ctx, mcp::v1::SubscriptionRequest());
    mcp::v1::SamplePacket p;
    while (reader->Read(&p)) {}
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // The agent's Forwarder, reading its projected token file.
  std::ofstream(dir_ / "agent-token") << "pod-token-b\n";
  std::filesystem::permissions(dir_ / "agent-token", std::filesystem::perms::owner_read);  // as projected (0400)
  ForwarderOptions o;
  o.brokers = {address};
  o.agent_id = "node-b";
  o.token_file = (dir_ / "agent-token").string();
  Forwarder fwd(o);
  Event e;
  e.ts_ns = 1'700'000'000'000'000'000ull;
  e.kind = EventKind::kUprobe;
  e.probe = "/usr/bin/worker:handle_request";
  fwd.consume(e);
  ASSERT_TRUE(fwd.flush_for(10s)) << log();
  // One review per distinct token: a token's answer is cached.
  int reviews = 0;
  for (const auto& r : api_->requests()) reviews += r.path == "/apis/authentication.k8s.io/v1/tokenreviews";
  EXPECT_EQ(reviews, 5);
  EXPECT_EQ(test::broker_stats(address, "pod-token-a").batches(), 3u);
}

TEST_F(PolicyControllerE2E, ApiFlagsWithoutK8sPoliciesAreAUsageError) {
  std::string err;
  EXPECT_EQ(test::run_broker({"--k8s-api-server", api_->url()}, dir_ / "usage.log", &err), 2);
  EXPECT_NE(err.find("need --k8s-policies"), std::string::npos) << err;
}

}  // namespace
}  // namespace mcp
