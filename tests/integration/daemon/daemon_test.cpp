// Runtime tier for the daemon (issues 7, 8, 14 and 16): `mcp-agent run --config` as a
// real process with real BPF, configured through a directory laid out like a
// kubelet-mounted ConfigMap, reloaded by swapping the `..data` symlink. Probes of files
// that appear later or are replaced, and reloads after the capability drop.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "control/tenant_quota.h"
#include "metrics/names.h"

#include "../../support/cgroup.h"
#include "../../support/config_map_dir.h"
#include "../../support/container.h"
#include "../../support/fake_apiserver.h"
#include "../../support/grafana_dashboard.h"
#include "../../support/process.h"
#include "../../support/prometheus.h"
#include "../../support/quota.h"
#include "../../support/run_command.h"
#include "../../support/run_command.h"
#include "../../support/wait_until.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using mcp::test::parse_json_lines;
using mcp::test::ConfigMapDir;
using mcp::test::wait_until;
using mcp::test::slurp;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

std::string config_text(double syscall_rate) {
  return "version: 1\n"
         "metrics:\n  listen: 127.0.0.1:0\n"
         "probes:\n"
         "  - binary: " + kWorkload + "\n    symbol: mcp_work\n    service: demo\n"
         "    tags: { version: v1 }\n"
         "syscalls:\n"
         "  - name: getppid\n    sampling: { rate: " + std::to_string(syscall_rate) + " }\n";
}

// `mcp-agent run` as a test::Process; construction returns once the agent says it is
// ready (every probe attached, consumer running), port() then names its metrics port.
class Daemon {
 public:
  // env: VAR=VALUE settings for the agent.
  Daemon(const fs::path& config, const fs::path& dir, const std::vector<std::string>& env = {})
      : p_(argv(config, env), dir, "agent") {
    std::smatch m;
    if (p_.wait_for_err(std::regex("metrics on 127\\.0\\.0\\.1:([0-9]+)[^]*mcp-agent: ready: "), 10s, &m))
      port_ = std::stoi(m[1]);
  }
  int port() const { return port_; }
  pid_t pid() const { return p_.pid(); }
  std::string log() const { return p_.err(); }
  // Waits until the agent's stderr matches `re` (false: it did not within the limit).
  bool wait_log(const std::regex& re, std::chrono::milliseconds limit = 10s) { return p_.wait_for_err(re, limit); }
  std::vector<nlohmann::json> events() const { return parse_json_lines(p_.out()); }
  int terminate() {
    p_.signal(SIGTERM);
    return p_.wait(30s).value_or(-1);
  }
  std::string get(const std::string& path) const {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get(path);
    return r ? std::to_string(r->status) + " " + r->body : "no response";
  }

 private:
  static std::vector<std::string> argv(const fs::path& config, const std::vector<std::string>& env) {
    std::vector<std::string> a = {"/usr/bin/env"};
    a.insert(a.end(), env.begin(), env.end());
    a.insert(a.end(), {kAgent, "run", "--config", config.string()});
    return a;
  }
  mcp::test::Process p_;
  int port_ = 0;
};

size_t count_uprobe_events(const std::vector<nlohmann::json>& events, const std::string& symbol = "mcp_work") {
  size_t n = 0;
  for (const auto& e : events)
    n += (e["kind"] == "uprobe" || e["kind"] == "uretprobe") && e["probe"].get<std::string>().ends_with(":" + symbol);
  return n;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    cm_ = std::make_unique<ConfigMapDir>(dir_ / "config");
  }
  // getppid is traced node-wide: events are told apart by comm, so the calls counted come
  // from a copy of the workload whose name no other test (running at the same time) uses.
  std::string caller() {
    const fs::path copy = dir_ / ("wl" + std::to_string(getpid() % 10000000));
    if (!fs::exists(copy)) fs::copy_file(kWorkload, copy);
    return copy.string();
  }
  bool from_caller(const nlohmann::json& e) { return e["comm"] == fs::path(caller()).filename().string(); }
  mcp::test::TempDir scratch_{"mcp-daemon"};
  const fs::path dir_ = scratch_.path();
  std::unique_ptr<ConfigMapDir> cm_;
};

// A selector names a pod's cgroup: every container of that pod is in scope (the cgroups
// below it), its sibling pod is not. Real cgroups in the kubelet's systemd layout.
TEST_F(DaemonTest, SelectorOnAPodSeesItsContainersAndNotItsSibling) {
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-sel-");
  const std::string qos = "kubepods.slice/kubepods-burstable.slice/";
  const std::string pod_a = qos + "kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice";
  const std::string pod_b = qos + "kubepods-burstable-pod2c5f39cb_3fb2_22e3_994f_1127e4ddb538.slice";
  const fs::path a1 = tree->add(pod_a + "/cri-containerd-" + std::string(64, 'a') + ".scope");
  const fs::path a2 = tree->add(pod_a + "/cri-containerd-" + std::string(64, 'b') + ".scope");
  const fs::path b1 = tree->add(pod_b + "/cri-containerd-" + std::string(64, 'c') + ".scope");
  cm_->update("version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n  - binary: " + kWorkload +
               "\n    symbol: mcp_work\n    selector: { cgroup_path: " + tree->relative_root() + "/" + pod_a + " }\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  // The sibling first: by the time the pod's own calls are all delivered, any of its would be too.
  for (const auto& cg : {b1, a1, a2})
    ASSERT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(cg, {kWorkload, "calls", "50"})), 0) << cg;
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 100; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto id = [&](const fs::path& p) { return mcp::cgroup::resolve_cgroup_id(p.string(), tree->mount()); };
  std::map<uint64_t, int> per_cgroup;
  for (const auto& e : d.events())
    if (e["kind"] == "uprobe") per_cgroup[e["cgroup_id"].get<uint64_t>()]++;
  EXPECT_EQ(per_cgroup[id(a1)], 50);
  EXPECT_EQ(per_cgroup[id(a2)], 50);
  EXPECT_EQ(per_cgroup[id(b1)], 0) << "the sibling pod is out of scope";
  EXPECT_EQ(per_cgroup.size(), 3u) << "nothing from anywhere else";
}

// A pod uid no other test (nor a parallel run) uses: pod cgroups are found by uid anywhere
// under the cgroup2 mount, where other tests build their own trees.
std::string unique_uid(int n) {
  char buf[40];
  snprintf(buf, sizeof buf, "%08x-%04x-4aaa-8aaa-%012x", static_cast<unsigned>(getpid()), n, static_cast<unsigned>(time(nullptr) & 0xffffff));
  return buf;
}

// The kubelet's systemd layout of pod `uid`'s container `id`, relative to a CgroupTree.
std::string kubelet_container(const std::string& uid, const std::string& id) {
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  return "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice/cri-containerd-" + id + ".scope";
}

std::string kubernetes_section(const mcp::test::FakeApiServer& api) {
  return "node_name: node-test\nkubernetes:\n  api_server: " + api.url() + "\n  token_file: " + api.token_file() +
         "\n  ca_file: " + api.ca_file() + "\n";
}

// A selector naming one pod (`pod: shop/p1`) sees the processes of that pod's containers and
// not those of its sibling in the same namespace; p1 is scheduled after the agent started,
// and is covered once the watch has seen it.
TEST_F(DaemonTest, PodSelectorSeesThePodsContainersNotItsSiblingAndFollowsALaterPod) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-podsel-");
  using mcp::test::FakeApiServer;
  const std::string uid1 = unique_uid(1), uid2 = unique_uid(2);
  const std::string a1_id(64, 'a'), a2_id(64, 'b'), b1_id(64, 'c');
  const fs::path b1 = tree->add(kubelet_container(uid2, b1_id));
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("shop", "p2", uid2, "node-test", {}, {{"app", b1_id}}));
  cm_->update("version: 1\n" + kubernetes_section(api) + "metrics:\n  listen: 127.0.0.1:0\n"
              "probes:\n  - binary: " + kWorkload + "\n    symbol: mcp_work\n    selector: { pod: shop/p1 }\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const auto id = [&](const fs::path& p) { return mcp::cgroup::resolve_cgroup_id(p.string(), tree->mount()); };
  const auto count = [&](const fs::path& cg) {
    size_t n = 0;
    for (const auto& e : d.events()) n += e["kind"] == "uprobe" && e["cgroup_id"].get<uint64_t>() == id(cg);
    return n;
  };
  // The kubelet makes the pod's cgroups, the API lists it: its processes come into scope.
  const fs::path a1 = tree->add(kubelet_container(uid1, a1_id));
  const fs::path a2 = tree->add(kubelet_container(uid1, a2_id));
  api.put_pod(FakeApiServer::make_pod("shop", "p1", uid1, "node-test", {}, {{"app", a1_id}, {"sidecar", a2_id}}));
  size_t probes = 0;  // calls made in a1 until one was seen (later ones may still be in flight)
  ASSERT_TRUE(wait_until([&] {
    EXPECT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(a1, {kWorkload, "calls", "1"})), 0);
    probes++;
    return count(a1) > 0;
  })) << d.log();
  // The sibling first: by the time p1's calls are all delivered, any of its would be too.
  for (const auto& cg : {b1, a1, a2})
    ASSERT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(cg, {kWorkload, "calls", "50"})), 0) << cg;
  ASSERT_TRUE(wait_until([&] { return count(a1) >= 51 && count(a2) == 50; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(count(b1), 0u) << "the sibling pod p2 is out of scope";
  EXPECT_EQ(count(a2), 50u);
  EXPECT_LE(count(a1), probes + 50);
  EXPECT_EQ(count_uprobe_events(d.events()), count(a1) + count(a2)) << "nothing from anywhere else";
}

// A quota on `namespace: team-a` holds the processes of the namespace's two pods to the quota
// together; a pod of another namespace (its own, much larger quota) keeps every call.
TEST_F(DaemonTest, NamespaceQuotaHoldsItsPodsTogetherAndSparesAnotherNamespace) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-nsquota-");
  using mcp::test::FakeApiServer;
  // The two namespaces' tenant ids must not share a quota bucket (a fixed property of the names).
  ASSERT_NE(mcp::control::tenant_bucket(mcp::control::pod_ref_tenant_id({"team-a", ""})),
            mcp::control::tenant_bucket(mcp::control::pod_ref_tenant_id({"team-b", ""})));
  const std::string u1 = unique_uid(11), u2 = unique_uid(12), u3 = unique_uid(13);
  const fs::path a = tree->add(kubelet_container(u1, std::string(64, 'a')));
  const fs::path b = tree->add(kubelet_container(u2, std::string(64, 'b')));
  const fs::path c = tree->add(kubelet_container(u3, std::string(64, 'c')));
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("team-a", "web", u1, "node-test"));
  api.put_pod(FakeApiServer::make_pod("team-a", "worker", u2, "node-test"));
  api.put_pod(FakeApiServer::make_pod("team-b", "db", u3, "node-test"));
  constexpr double kQuota = 1000, kBurst = 200;
  cm_->update("version: 1\n" + kubernetes_section(api) + "metrics:\n  listen: 127.0.0.1:0\n"
              "probes:\n  - binary: " + kWorkload + "\n    symbol: mcp_work\n"
              "quotas:\n  tenants:\n    - { namespace: team-a, rate: 1000, burst: 200 }\n"
              "    - { namespace: team-b, rate: 1000000 }\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const pid_t pa = mcp::test::spawn_in_cgroup(a, {kWorkload, "rate", "5000", "3"});
  const pid_t pb = mcp::test::spawn_in_cgroup(b, {kWorkload, "rate", "5000", "3"});
  const pid_t pc = mcp::test::spawn_in_cgroup(c, {kWorkload, "calls", "6000"});
  for (pid_t p : {pa, pb, pc}) ASSERT_EQ(mcp::test::wait_exit(p), 0);
  const auto id = [&](const fs::path& p) { return mcp::cgroup::resolve_cgroup_id(p.string(), tree->mount()); };
  const uint64_t id_a = id(a), id_b = id(b), id_c = id(c);
  const auto count_c = [&] {
    size_t n = 0;
    for (const auto& e : d.events()) n += e["kind"] == "uprobe" && e["cgroup_id"].get<uint64_t>() == id_c;
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return count_c() == 6000; })) << "team-b keeps every call: " << count_c();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  auto w = mcp::test::quota_window(d.events(), {id_a, id_b});
  EXPECT_GT(w.per_cgroup[id_a], 0u);
  EXPECT_GT(w.per_cgroup[id_b], 0u);
  mcp::test::expect_within_quota(w, kQuota, kBurst);  // one quota for both pods (2 x 5000/s offered)
}

// `ready_file` in agent.yaml means what --ready-file means.
// Pod names from the API: the agent watches its node's pods on the (fake) API server and
// puts pod, namespace, container and the configured labels on the events of a process in a
// real cgroup laid out as the kubelet's systemd driver does; a pod that appears after the
// agent started is named through the watch.
TEST_F(DaemonTest, PodNamesFromTheApiServerReachTheEventsOfAKubeletCgroup) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-names-");
  using mcp::test::FakeApiServer;
  const std::string uid_a = "1b4e28ba-2fa1-11d2-883f-0016d3cca427", uid_b = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538";
  const std::string id_a(64, 'a'), id_b(64, 'b');
  const fs::path a = tree->add("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/cri-containerd-" + id_a + ".scope");
  const fs::path b = tree->add("kubepods.slice/kubepods-pod2c5f39cb_3fb2_22e3_994f_1127e4ddb538.slice/cri-containerd-" + id_b + ".scope");
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("shop", "web-1", uid_a, "node-test", {{"app", "web"}, {"team", "t1"}}, {{"server", id_a}}));
  cm_->update("version: 1\nnode_name: node-test\nmetrics:\n  listen: 127.0.0.1:0\n"
               "kubernetes:\n  api_server: " + api.url() + "\n  token_file: " + api.token_file() +
               "\n  ca_file: " + api.ca_file() + "\n  pod_labels: [app]\n"
               "probes:\n  - binary: " + kWorkload + "\n    symbol: mcp_work\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const auto id = [&](const fs::path& p) { return mcp::cgroup::resolve_cgroup_id(p.string(), tree->mount()); };
  ASSERT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(a, {kWorkload, "calls", "20"})), 0);
  const auto from = [&](const fs::path& cg) {
    std::vector<nlohmann::json> out;
    for (const auto& e : d.events())
      if (e["kind"] == "uprobe" && e["cgroup_id"].get<uint64_t>() == id(cg)) out.push_back(e);
    return out;
  };
  ASSERT_TRUE(wait_until([&] { return from(a).size() == 20; })) << d.log();
  for (const auto& e : from(a)) {  // the agent waited for the pod list before it said ready
    EXPECT_EQ(e.value("pod_uid", ""), uid_a) << e.dump();
    EXPECT_EQ(e.value("pod", ""), "web-1") << e.dump();
    EXPECT_EQ(e.value("namespace", ""), "shop") << e.dump();
    EXPECT_EQ(e.value("container", ""), "server") << e.dump();
    EXPECT_EQ(e.value("pod_labels", nlohmann::json()), (nlohmann::json{{"app", "web"}})) << e.dump();
  }
  // A pod scheduled later: named once its ADDED event has reached the agent.
  api.put_pod(FakeApiServer::make_pod("db", "pg-0", uid_b, "node-test", {{"app", "pg"}}, {{"postgres", id_b}}));
  ASSERT_TRUE(wait_until([&] {
    EXPECT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(b, {kWorkload, "calls", "1"})), 0);
    const auto events = from(b);
    return !events.empty() && events.back().value("pod", "") == "pg-0";
  })) << d.log();
  const auto last = from(b).back();
  EXPECT_EQ(last.value("namespace", ""), "db");
  EXPECT_EQ(last.value("container", ""), "postgres");
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(d.log().find("pod names unavailable"), std::string::npos) << d.log();
}

// Outside a cluster (no API server configured, no KUBERNETES_SERVICE_HOST) a pod's events keep
// their cgroup-derived ids and the agent says once that names are unavailable.
TEST_F(DaemonTest, WithoutApiAccessPodEventsKeepTheirIdsAndTheAgentSaysSoOnce) {
  std::unique_ptr<mcp::test::CgroupTree> tree;
  MCP_CGROUP_TREE_OR_SKIP(tree, "mcp-k8s-noapi-");
  unsetenv("KUBERNETES_SERVICE_HOST");
  const std::string id_a(64, 'a');
  const fs::path a = tree->add("kubepods/besteffort/pod3d6a4adc-4ac3-33f4-a55f-2238f5eec649/" + id_a);
  const fs::path a2 = tree->add("kubepods/besteffort/pod3d6a4adc-4ac3-33f4-a55f-2238f5eec649/" + std::string(64, 'c'));
  cm_->update("version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n  - binary: " + kWorkload + "\n    symbol: mcp_work\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  for (const auto& cg : {a, a2}) ASSERT_EQ(mcp::test::wait_exit(mcp::test::spawn_in_cgroup(cg, {kWorkload, "calls", "10"})), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 20; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  size_t in_pod = 0;
  for (const auto& e : d.events()) {
    if (e["kind"] != "uprobe" || e.value("pod_uid", "") != "3d6a4adc-4ac3-33f4-a55f-2238f5eec649") continue;
    in_pod++;
    EXPECT_FALSE(e.contains("pod")) << e.dump();
  }
  EXPECT_EQ(in_pod, 20u);
  const std::string log = d.log();
  const auto first = log.find("pod names unavailable: not in a cluster");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("pod names unavailable", first + 1), std::string::npos) << "said once: " << log;
}

TEST_F(DaemonTest, ReadyFileKeyGetsTheReadinessLine) {
  const fs::path ready = dir_ / "ready";
  cm_->update("metrics:\n  listen: 127.0.0.1:0\nready_file: " + ready.string() + "\nsyscalls:\n  - name: getppid\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  EXPECT_EQ(slurp(ready.string()), "mcp-agent: ready: 1 probes attached\n") << "written before the stderr line";
  EXPECT_EQ(d.terminate(), 0) << d.log();
}

TEST_F(DaemonTest, ConfigMapSwapRetunesTheKernelWithoutAGapForUnchangedProbes) {
  cm_->update(config_text(1.0));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  // The uprobe (unchanged by the reload) sees a steady stream across it.
  std::thread calls([] { std::system((kWorkload + " rate 500 4 >/dev/null").c_str()); });
  // The stream is flowing before the first batch of calls and the reload.
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 100; })) << d.log();
  ASSERT_EQ(std::system((caller() + " getppid 200").c_str()), 0);
  cm_->update(config_text(0.25));
  ASSERT_TRUE(wait_until([&] { return d.log().find("reloaded") != std::string::npos; })) << d.log();
  ASSERT_EQ(std::system((caller() + " getppid 200").c_str()), 0);
  calls.join();
  EXPECT_EQ(d.terminate(), 0) << d.log();

  uint64_t work = 0, syscalls_before = 0, syscalls_after = 0;
  for (const auto& e : d.events()) {
    if (e["kind"] == "uprobe") {
      work++;
      EXPECT_EQ(e["service"], "demo");
      EXPECT_EQ(e["tags"]["version"], "v1");
    } else if (!from_caller(e)) {
      continue;
    } else if (e["weight"] == 1.0) {
      syscalls_before++;
    } else {
      EXPECT_EQ(e["weight"], 4.0);
      syscalls_after++;
    }
  }
  EXPECT_GE(work, 1900u) << "rate 500/s for 4 s, every call kept across the reload";
  EXPECT_EQ(syscalls_before, 200u);
  EXPECT_GT(syscalls_after, 15u);
  EXPECT_LT(syscalls_after, 110u);
}

TEST_F(DaemonTest, InvalidConfigIsRejectedCountedAndThePreviousStaysInForce) {
  cm_->update(config_text(1.0));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  EXPECT_EQ(d.get("/healthz").substr(0, 3), "200");
  cm_->update("version: 1\nprobes:\n  - binary: /bin/true\n    symbl: main\n");
  ASSERT_TRUE(wait_until([&] { return d.get("/metrics").find("mcp_config_reload_failures_total 1") != std::string::npos; }))
      << d.get("/metrics");
  EXPECT_NE(d.log().find("agent.yaml:4:5"), std::string::npos) << "the reason, with its position: " << d.log();
  ASSERT_EQ(std::system((caller() + " getppid 100").c_str()), 0);
  const auto metrics = d.get("/metrics");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics, m, std::regex(R"(mcp_events_seen_total\{probe="syscall:getppid"\} (\d+))")))
      << metrics;
  EXPECT_GE(std::stoi(m[1]), 100);
  EXPECT_EQ(d.terminate(), 0);
  int syscalls = 0;
  for (const auto& e : d.events()) syscalls += e["kind"] == "syscall" && from_caller(e);
  EXPECT_EQ(syscalls, 100) << "still at the old rate 1";
}

// The value of one series in a /metrics page, or -1 when absent.
double metric(const std::string& page, const std::string& series) {
  const auto at = page.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + series.size() + 2));
}

std::string uprobe_config(const fs::path& binary, const std::string& extra = "") {
  return "version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n  - binary: " + binary.string() +
         "\n    symbol: mcp_work\n" + extra;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// Issue 34: a reload that changes a windowed probe's rate while its windows cycle. The windows
// go on at the new coverage (more open after the reload, the coverage gauge moves to the new
// share), the weights follow the rate each event was kept at, their sum still estimates the
// calls, and no link or descriptor is left behind.
TEST_F(DaemonTest, ReloadWhileWindowsCycleRetunesTheWindowsAndKeepsTheEstimate) {
  cm_->update(uprobe_config(kWorkload, "    sampling: { rate: 0.05 }\n"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const std::string windows = "mcp_sampling_windows_total{probe=\"" + kWorkload + ":mcp_work\"}";
  const std::string coverage = "mcp_sampling_window_coverage_ratio{probe=\"" + kWorkload + ":mcp_work\"}";
  std::string calls_out;
  std::thread calls([&] { calls_out = mcp::test::run_command({kWorkload, "rate", "2000", "6"}).out; });
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), windows) >= 30; }, 10s)) << d.get("/metrics");
  const double fds_before = static_cast<double>(std::distance(fs::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd"), {}));
  cm_->update(uprobe_config(kWorkload, "    sampling: { rate: 0.02 }\n"));
  ASSERT_TRUE(d.wait_log(std::regex("reloaded"))) << d.log();
  const double at_reload = metric(d.get("/metrics"), windows);
  calls.join();
  const std::string page = d.get("/metrics");
  EXPECT_GE(metric(page, windows), at_reload + 15) << "2 ms windows every 100 ms for the ~3 s after the reload\n" << page;
  EXPECT_GT(metric(page, coverage), 0.015) << page;  // between the old 5% and the new 2% share
  EXPECT_LT(metric(page, coverage), 0.05) << page;
  const double fds_after = static_cast<double>(std::distance(fs::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd"), {}));
  EXPECT_LE(fds_after, fds_before + 24) << "closes in flight hold a few";
  EXPECT_EQ(d.terminate(), 0) << d.log();

  std::smatch m;
  ASSERT_TRUE(std::regex_search(calls_out, m, std::regex("calls ([0-9]+)"))) << calls_out;
  const double made = std::stod(m[1]);
  double estimate = 0;
  size_t at_20 = 0, at_50 = 0;
  for (const auto& e : d.events()) {
    if (e["kind"] != "uprobe") continue;
    const double w = e["weight"];
    estimate += w;
    at_20 += std::abs(w - 20) < 1e-6;
    at_50 += std::abs(w - 50) < 1e-6;
    EXPECT_TRUE(std::abs(w - 20) < 1e-6 || std::abs(w - 50) < 1e-6) << e.dump();
  }
  EXPECT_GT(at_20, 0u);
  EXPECT_GT(at_50, 0u);
  EXPECT_NEAR(estimate, made, 0.15 * made) << at_20 << " events at weight 20, " << at_50 << " at 50";
}

// agent.yaml probes on the workload's functions, each at its rate.
std::string functions_config(const std::vector<std::pair<std::string, double>>& probes) {
  std::string text = "version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n";
  for (const auto& [symbol, rate] : probes)
    text += "  - {binary: " + kWorkload + ", symbol: " + symbol + ", sampling: {rate: " + std::to_string(rate) + "}}\n";
  return text;
}

// Issue 36: uprobes of one file share one uprobe_multi link (a configuration's, as a wildcard's
// matches). A member a reload removes keeps nothing from then on, though the link still fires
// for it while the others live, and its id goes to no probe a later reload adds meanwhile (its
// calls would be counted as that probe's).
TEST_F(DaemonTest, AProbeRemovedFromASharedLinkKeepsNothingAndLendsItsIdToNoOther) {
  cm_->update(functions_config({{"mcp_work", 1}, {"mcp_sleep", 1}, {"mcp_recurse", 1}}));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  std::thread calls([] { std::system((kWorkload + " rate 2000 6 >/dev/null").c_str()); });
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 500; })) << d.log();
  cm_->update(functions_config({{"mcp_sleep", 1}, {"mcp_recurse", 1}}));
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reloads_total") == 2; })) << d.log();
  const size_t at_removal = count_uprobe_events(d.events());
  cm_->update(functions_config({{"mcp_sleep", 1}, {"mcp_recurse", 1}, {"mcp_maybe_jump", 1}}));
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reloads_total") == 3; })) << d.log();
  calls.join();  // seconds of mcp_work calls after its removal
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto events = d.events();
  EXPECT_LT(count_uprobe_events(events), at_removal + 200) << "mcp_work kept after its removal";
  EXPECT_EQ(count_uprobe_events(events, "mcp_maybe_jump"), 0u) << "mcp_work's calls under another probe's name";
}

// Issue 36 with issue 34: a probe sharing a link has no sampling windows of its own; a reload
// that lowers its rate to where windows apply attaches it again, alone, and its windows run.
TEST_F(DaemonTest, AReloadLoweringASharedLinksProbeGivesItWindows) {
  cm_->update(functions_config({{"mcp_work", 1}, {"mcp_sleep", 1}}));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const std::string windows = "mcp_sampling_windows_total{probe=\"" + kWorkload + ":mcp_work\"}";
  std::thread calls([] { std::system((kWorkload + " rate 2000 5 >/dev/null").c_str()); });
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 500; })) << d.log();
  cm_->update(functions_config({{"mcp_work", 0.05}, {"mcp_sleep", 1}}));
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), windows) >= 10; }, 10s)) << d.get("/metrics");
  calls.join();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  size_t at_20 = 0;
  for (const auto& e : d.events()) at_20 += e["kind"] == "uprobe" && std::abs(e["weight"].get<double>() - 20) < 1e-6;
  EXPECT_GT(at_20, 0u) << "events kept in the windows, at the new rate";
}

// Issue 35: a node whose kernel lacks features runs without them and says so: /healthz names
// each, mcp_kernel_feature exports them, and probes attached before and after the capability
// drop (a reload) count exactly through the fallbacks (a program copy per probe here).
TEST_F(DaemonTest, AKernelWithoutFeaturesIsNamedInHealthAndMetricsAndStillTraces) {
  cm_->update(functions_config({{"mcp_work", 1}}));
  Daemon d(cm_->config_path(), dir_, {"MCP_KERNEL_FEATURES_OFF=attach_cookie,find_vma,task_storage,task_btf"});
  ASSERT_GT(d.port(), 0) << d.log();
  const std::string health = d.get("/healthz");
  EXPECT_EQ(health.substr(0, 7), "200 ok\n") << health;
  EXPECT_NE(health.find("kernel find_vma off: needs bpf_find_vma (5.17)"), std::string::npos) << health;
  EXPECT_NE(health.find("kernel attach_cookie off: needs bpf_get_attach_cookie (5.15)"), std::string::npos) << health;
  const std::string metrics = d.get("/metrics");
  EXPECT_EQ(metric(metrics, "mcp_kernel_feature{feature=\"find_vma\",since=\"5.17\"}"), 0) << metrics;
  EXPECT_EQ(metric(metrics, "mcp_kernel_feature{feature=\"ringbuf\",since=\"5.8\"}"), 1) << metrics;
  ASSERT_EQ(std::system((kWorkload + " calls 100 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 100; })) << d.log();
  // attached after the drop: the copy is loaded with the capabilities the agent kept
  cm_->update(functions_config({{"mcp_work", 1}, {"mcp_sleep", 1}}));
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + kWorkload + ":mcp_sleep\",state=\"attached\"}") == 1;
  })) << d.log();
  ASSERT_EQ(std::system((kWorkload + " sleep 20 0 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events(), "mcp_sleep") >= 20; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(count_uprobe_events(d.events()), 100u);
  EXPECT_EQ(count_uprobe_events(d.events(), "mcp_sleep"), 20u);
}

// Issue 16: one configuration for a whole fleet; a node without the binary yet must not
// lose the agent, and must trace the binary once it is installed, without a reload.
TEST_F(DaemonTest, ProbeOfAnAbsentBinaryWaitsThenAttachesWhenTheFileAppears) {
  const fs::path app = dir_ / "opt" / "app";  // not even its directory exists yet
  const std::string probe = app.string() + ":mcp_work";
  cm_->update(uprobe_config(app));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + probe + "\",state=\"waiting\"}") == 1;
  })) << d.get("/metrics") << d.log();
  const std::string health = d.get("/healthz");
  EXPECT_EQ(health.substr(0, 7), "200 ok\n") << health;
  EXPECT_NE(health.find("probe " + probe + " waiting: file not found: " + app.string()), std::string::npos) << health;

  // Installed the way `cp` installs: written in place, so the agent may see it half-written.
  fs::create_directories(app.parent_path());
  fs::copy_file(kWorkload, app);
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + probe + "\",state=\"attached\"}") == 1;
  })) << d.get("/metrics") << d.log();
  EXPECT_EQ(metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + probe + "\",state=\"waiting\"}"), 0);
  ASSERT_EQ(std::system((app.string() + " calls 100 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 100; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(count_uprobe_events(d.events()), 100u);
  EXPECT_EQ(count(d.log(), "probe " + probe + " waiting"), 1u) << "reported once: " << d.log();
  EXPECT_EQ(count(d.log(), "reloaded"), 0u) << "no reload involved: " << d.log();
}

// Issue 16: `mv new old`, as dpkg installs an upgrade. Processes started afterwards run the
// new inode and are traced; one still running the old inode stays traced too.
TEST_F(DaemonTest, ReplacedBinaryIsFollowedAndTheOldOneStaysTracedWhileItRuns) {
  const fs::path app = dir_ / "app";
  const std::string probe = app.string() + ":mcp_work";
  fs::copy_file(kWorkload, app);
  cm_->update(uprobe_config(app));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_TRUE(wait_until([&] { return d.log().find("probe " + probe + " attached") != std::string::npos; })) << d.log();

  // The old process runs across the replacement; it prints how many calls it made.
  const fs::path old_out = dir_ / "old.out";
  std::thread old_process([&] { std::system((app.string() + " rate 200 4 >" + old_out.string()).c_str()); });
  EXPECT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 1; })) << "the old file runs: " << d.log();
  fs::copy_file(kWorkload, dir_ / "app.new");
  fs::rename(dir_ / "app.new", app);
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_reattach_total{probe=\"" + probe + "\"}") == 1;
  })) << d.get("/metrics") << d.log();
  ASSERT_EQ(std::system((app.string() + " calls 100 >/dev/null").c_str()), 0);
  old_process.join();
  const std::string old_calls = slurp(old_out);
  ASSERT_EQ(old_calls.rfind("calls ", 0), 0u) << old_calls;
  const size_t expected = 100 + std::stoul(old_calls.substr(6));
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= expected; }))
      << count_uprobe_events(d.events()) << " of " << expected << "\n" << d.log();
  // No process maps the old file any more: its attachment goes.
  ASSERT_TRUE(wait_until([&] { return d.log().find("detached from it") != std::string::npos; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(count_uprobe_events(d.events()), expected) << "every call, old and new file, once";
}

// Issue 14 item 4: reloads run after the capability drop and must still attach uprobes.
TEST_F(DaemonTest, ReloadAddsAUprobeAfterTheCapabilityDrop) {
  cm_->update("version: 1\nmetrics:\n  listen: 127.0.0.1:0\nsyscalls: [getppid]\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  cm_->update(uprobe_config(kWorkload, "syscalls: [getppid]\n"));
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reloads_total") == 2; }))
      << d.get("/metrics") << d.log();
  EXPECT_EQ(metric(d.get("/metrics"), "mcp_config_reload_failures_total"), 0) << d.log();
  ASSERT_EQ(std::system((kWorkload + " calls 50 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 50; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(count_uprobe_events(d.events()), 50u);
}

// Issue 14 item 4: a reload that changes a probe's attachment (latency), adds a good probe
// and one that cannot attach is rolled back whole: every previous probe stays attached,
// unchanged, and the staged good one is gone.
TEST_F(DaemonTest, FailedReloadRollsBackAndEveryPreviousProbeKeepsDelivering) {
  const fs::path not_elf = dir_ / "script.sh";
  std::ofstream(not_elf) << "#!/bin/sh\n";
  cm_->update(uprobe_config(kWorkload, "syscalls: [getppid]\n"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  cm_->update("version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n"
               "  - binary: " + kWorkload + "\n    symbol: mcp_work\n    latency: true\n"
               "  - binary: " + kWorkload + "\n    symbol: mcp_sleep\n"
               "  - binary: " + not_elf.string() + "\n    symbol: main\n"
               "syscalls:\n  - name: getppid\n    sampling: { rate: 0.5 }\n");
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reload_failures_total") == 1; }))
      << d.get("/metrics") << d.log();
  EXPECT_NE(d.log().find("is not an ELF file"), std::string::npos) << d.log();
  const std::string page = d.get("/metrics");
  EXPECT_EQ(page.find(":mcp_sleep\""), std::string::npos) << "the staged probe was detached: " << page;

  ASSERT_EQ(std::system((kWorkload + " calls 100 >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((kWorkload + " sleep 20 0 >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((caller() + " getppid 100").c_str()), 0);
  auto syscalls = [&] {
    size_t n = 0;
    for (const auto& e : d.events()) n += e["kind"] == "syscall" && from_caller(e);
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 100 && syscalls() >= 100; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto events = d.events();
  EXPECT_EQ(count_uprobe_events(events), 100u) << "the mcp_work probe is attached once, as before";
  EXPECT_EQ(count_uprobe_events(events, "mcp_sleep"), 0u);
  EXPECT_EQ(syscalls(), 100u) << "getppid still at the old rate 1";
  for (const auto& e : events)
    EXPECT_NE(e["kind"], "uretprobe") << "still the probe without latency: " << e;
}

// Issue 29: a reload that swaps 150 probes for 150 others was refused ("at most 255 probes"):
// the new ones are staged beside the running ones, so the kernel side has room for twice the
// largest configuration. Real tracepoints: 150 syscalls, then 150 others with getppid.
TEST_F(DaemonTest, AReloadReplacingEveryProbeOfALargeConfigurationApplies) {
  std::vector<std::string> names;  // syscalls with both tracepoints, getppid last
  for (const auto& e : fs::directory_iterator("/sys/kernel/tracing/events/syscalls")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("sys_enter_", 0) == 0 && n != "sys_enter_getppid" &&
        fs::exists(e.path().parent_path() / ("sys_exit_" + n.substr(10))))
      names.push_back(n.substr(10));
  }
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 299u) << "this kernel has too few syscall tracepoints";
  auto config = [&](size_t from, bool with_getppid) {
    std::string text = "version: 1\nmetrics:\n  listen: 127.0.0.1:0\nsyscalls:\n";
    for (size_t i = from; i < from + (with_getppid ? 149 : 150); i++)
      text += "  - {name: " + names[i] + ", sampling: {rate: 0.001}}\n";
    if (with_getppid) text += "  - getppid\n";
    return text;
  };
  cm_->update(config(0, false));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  cm_->update(config(150, true));
  // /healthz answers while the reload runs (it once waited for the reload's lock: 7-9 s): no
  // answer takes more than a third of the reload (at least 1 s, for a fast one).
  const auto done = std::regex("config: (reloaded|rejected|reload failed|.*keeping the previous)");
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration slowest{};
  while (std::chrono::steady_clock::now() - start < 60s && !std::regex_search(d.log(), done)) {
    const auto asked = std::chrono::steady_clock::now();
    EXPECT_EQ(d.get("/healthz").substr(0, 3), "200");
    slowest = std::max(slowest, std::chrono::steady_clock::now() - asked);
  }
  const auto reload = std::chrono::steady_clock::now() - start;
  EXPECT_LT(slowest, std::max<std::chrono::steady_clock::duration>(1s, reload / 3))
      << "the reload (" << std::chrono::duration<double>(reload).count() << " s) held /healthz";
  // The links are closed together: the reload is not 300 grace periods long (16 s here).
  ASSERT_TRUE(d.wait_log(done, 60s)) << d.log();
  EXPECT_EQ(metric(d.get("/metrics"), "mcp_config_reload_failures_total"), 0) << d.log();
  EXPECT_NE(d.log().find("+150 -150 probes"), std::string::npos) << d.log();
  ASSERT_EQ(std::system((caller() + " getppid 100").c_str()), 0);
  auto syscalls = [&] {
    size_t n = 0;
    for (const auto& e : d.events()) n += e["kind"] == "syscall" && e["probe"] == "syscall:getppid" && from_caller(e);
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return syscalls() >= 100; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(syscalls(), 100u);
}

// The same change without the bad probe applies: the probe comes back with latency.
TEST_F(DaemonTest, ReloadChangingLatencySwapsTheAttachmentWithoutLosingTheProbe) {
  cm_->update(uprobe_config(kWorkload));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  cm_->update(uprobe_config(kWorkload, "    latency: true\n"));
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reloads_total") == 2; }))
      << d.get("/metrics") << d.log();
  ASSERT_EQ(std::system((kWorkload + " calls 50 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 50; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto events = d.events();
  EXPECT_EQ(count_uprobe_events(events), 50u) << "the old attachment is gone";
  for (const auto& e : events)
    EXPECT_EQ(e["kind"], "uretprobe") << "every call through the latency probe, once: " << e;
}

// Issue 36: a USDT probe in agent.yaml goes the uprobe's way: it waits for its binary,
// attaches when the file appears (semaphore set, strings and stacks as configured), and a
// reload that changes which arguments are strings re-attaches it without losing a hit.
TEST_F(DaemonTest, UsdtProbeWaitsForItsBinaryAndAReloadChangesItsStrings) {
  const fs::path app = dir_ / "opt" / "app";
  const std::string probe = "usdt:" + app.string() + ":mcp:tick";
  const auto config = [&](const std::string& strings) {
    return "version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n  - binary: " + app.string() +
           "\n    usdt: mcp:tick\n    string_args: [" + strings + "]\n    stack: user\n";
  };
  const auto hits = [](const std::vector<nlohmann::json>& events) {
    return std::count_if(events.begin(), events.end(), [](const auto& e) { return e["kind"] == "usdt"; });
  };
  cm_->update(config("1"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + probe + "\",state=\"waiting\"}") == 1;
  })) << d.get("/metrics") << d.log();
  fs::create_directories(app.parent_path());
  fs::copy_file(kWorkload, app);
  ASSERT_TRUE(wait_until([&] {
    return metric(d.get("/metrics"), "mcp_probe_state{probe=\"" + probe + "\",state=\"attached\"}") == 1;
  })) << d.get("/metrics") << d.log();
  ASSERT_EQ(std::system((app.string() + " usdt 100 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return hits(d.events()) >= 100; })) << d.log();

  cm_->update(config("2"));  // arg2 is an address nothing maps: no string, hits still kept
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), "mcp_config_reloads_total") == 2; }))
      << d.get("/metrics") << d.log();
  ASSERT_EQ(std::system((app.string() + " usdt 50 >/dev/null").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return hits(d.events()) >= 150; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto events = d.events();
  ASSERT_EQ(hits(events), 150) << "each hit once, none lost across the reload";
  size_t with_name = 0, frames_named = 0;
  std::string unnamed;
  for (const auto& e : events) {
    if (e["kind"] != "usdt") continue;
    EXPECT_EQ(e["probe"], probe);
    with_name += e.contains("attributes") && e["attributes"].contains("arg1");
    ASSERT_TRUE(e.contains("stack")) << e;
    const bool named = e["stack"][0]["module"] == app.string() && e["stack"][0]["sym"] == "main";
    frames_named += named;
    if (!named && unnamed.empty()) unnamed = e["stack"].dump();
  }
  EXPECT_EQ(with_name, 100u) << "strings as each configuration said";
  // Named even when the process exited before the agent read its stack (each run here does).
  EXPECT_EQ(frames_named, 150u) << "the probe site is in main, in the file the probe attached to; first other: "
                                << unnamed;
}

TEST_F(DaemonTest, BadConfigAtStartupIsOneLineAndExitCodeTwo) {
  std::ofstream(dir_ / "bad.yaml") << "version: 1\nsyscalls: [getppid]\nbrokr: {}\n";
  auto r = mcp::test::run_command({kAgent, "run", "--config", (dir_ / "bad.yaml").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bad.yaml:3:1"), std::string::npos) << r.err;
}

// Issue 14 item 12: another user could rewrite a world-writable file (and the agent reloads
// files live), so it is refused at start with one line and exit code 2, and check-config agrees.
TEST_F(DaemonTest, ConfigWritableByOthersIsRefusedAtStartup) {
  cm_->update(config_text(1.0));
  const fs::path real = fs::canonical(cm_->config_path());
  fs::permissions(real, fs::perms::others_write, fs::perm_options::add);
  for (const char* command : {"run", "check-config"}) {
    auto r = std::string(command) == "run"
                 ? mcp::test::run_command({kAgent, "run", "--config", cm_->config_path().string()})
                 : mcp::test::run_command({kAgent, "check-config", cm_->config_path().string()});
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("refusing to load a configuration others can change: file " + real.string() +
                         " is writable by group or others (mode 0646; chmod go-w)"),
              std::string::npos)
        << command << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command << ": one line\n" << r.err;
  }
}

// Issue 51, finding 4: with the audit trail's disk full, 1,842 of 2,000 events once left the
// node without their record while /healthz said 200. Fail closed: an audited event goes only
// with its record, the rest are counted in mcp_audit_dropped_events_total, the error is in the
// log at once, /healthz is 503 with the reason until a record is written again, and the trail
// still verifies.
TEST_F(DaemonTest, AFullAuditDiskWithholdsAuditedEventsFailsHealthzAndRecovers) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const fs::path mnt = dir_ / "audit";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) GTEST_SKIP() << "cannot mount tmpfs: " << strerror(errno);
  struct Unmount {
    fs::path at;
    ~Unmount() { umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  cm_->update(uprobe_config(kWorkload, "    service: demo\ncompliance:\n"
                                       "  rules: 'rule \"pii\" when pid > 0 then redact = [\"args[1]\"] audit.trace = [\"GDPR-9\"] end'\n"
                                       "  audit_log:\n    dir: " + (mnt / "trail").string() + "\n"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  const auto audit = [&](const char* name) { return metric(d.get("/metrics"), std::string("mcp_audit_") + name + "_total"); };
  ASSERT_EQ(std::system((kWorkload + " calls 50").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return audit("records") == 50; })) << d.get("/metrics") << d.log();
  EXPECT_EQ(d.get("/healthz").substr(0, 6), "200 ok");

  {
    std::ofstream fill(mnt / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (fill.write(block.data(), block.size()) && fill.flush()) {
    }
  }
  ASSERT_EQ(std::system((kWorkload + " calls 500").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return audit("records") + audit("dropped_events") == 550; })) << d.get("/metrics");
  const double records = audit("records");
  EXPECT_GT(audit("dropped_events"), 400) << "the disk was full after a few records";
  EXPECT_EQ(audit("failures"), audit("dropped_events"));
  EXPECT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) == records; }))
      << count_uprobe_events(d.events()) << " events out, " << records << " records: no event leaves without its record";
  const std::string health = d.get("/healthz");
  EXPECT_EQ(health.substr(0, 4), "503 ") << health;
  EXPECT_NE(health.find("No space left on device"), std::string::npos) << health;
  EXPECT_NE(d.log().find("audit log: cannot write"), std::string::npos) << d.log();

  fs::remove(mnt / "filler");
  ASSERT_EQ(std::system((kWorkload + " calls 20").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return audit("records") == records + 20; })) << d.get("/metrics");
  EXPECT_EQ(d.get("/healthz").substr(0, 6), "200 ok");
  EXPECT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) == records + 20; })) << d.log();
  EXPECT_EQ(d.terminate(), 1) << "records were lost: the run says so\n" << d.log();
  const auto v = mcp::test::run_command(
      {kAgent, "audit", "verify", "--key", (mnt / "trail.key").string(), (mnt / "trail").string()});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("ok: " + std::to_string(static_cast<int>(records) + 20) + " records"), std::string::npos) << v.out;
}

// The agent's real /metrics page: promtool accepts it, it carries every metric of the names
// table (docs/metrics.md's and the dashboard's source), and a real Prometheus scraping it answers
// PromQL and every dashboard panel over agent metrics.
TEST_F(DaemonTest, MetricsPassPromtoolCoverTheNamesTableAndFeedPrometheusAndTheDashboard) {
  if (!mcp::test::has_prometheus()) GTEST_SKIP() << "prometheus not installed (scripts/setup installs it)";
  cm_->update(config_text(1.0));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_EQ(std::system((caller() + " getppid 100").c_str()), 0);
  const std::string getppid = "mcp_events_seen_total{probe=\"syscall:getppid\"}";
  ASSERT_TRUE(wait_until([&] { return metric(d.get("/metrics"), getppid) >= 100; })) << d.get("/metrics");
  const std::string page = d.get("/metrics").substr(4);  // after "200 "
  const auto check = mcp::test::promtool_check_metrics(page);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << page;
  EXPECT_EQ(check.out + check.err, "");
  for (const auto& spec : mcp::metrics::kAgentMetrics)
    EXPECT_NE(page.find("# TYPE " + std::string(spec.name) + " "), std::string::npos) << spec.name << "\n" << page;

  mcp::test::PrometheusServer prom({{"mcp-agent", "127.0.0.1:" + std::to_string(d.port())}}, dir_ / "prom");
  const auto seen = prom.wait_value(R"(sum(mcp_events_seen_total{job="mcp-agent",probe="syscall:getppid"}))",
                                    [](double v) { return v >= 100; });
  EXPECT_GE(seen.value_or(0), 100) << prom.log();
  EXPECT_EQ(prom.value(R"(mcp_sampling_probability{probe="syscall:getppid"})"), 1);
  ASSERT_EQ(std::system((caller() + " getppid 100").c_str()), 0);  // a rate for the panels
  const mcp::test::DashboardQuery* kept_vs_seen = nullptr;
  const auto queries = mcp::test::dashboard_queries(mcp::test::load_dashboard());
  for (const auto& q : queries) {
    if (q.panel == "Kept vs seen per probe" && kept_vs_seen == nullptr) kept_vs_seen = &q;
    if (std::any_of(q.metrics.begin(), q.metrics.end(), [](const auto& m) { return m.starts_with("mcp_broker_"); }))
      continue;
    const auto answer = prom.query_answer(q.promql);
    EXPECT_EQ(answer.value("status", ""), "success") << q.panel << ": " << q.promql << "\n" << answer.dump();
  }
  ASSERT_NE(kept_vs_seen, nullptr) << "the dashboard lost its kept vs seen panel";
  EXPECT_TRUE(wait_until([&] {
    for (const auto& series : prom.query(kept_vs_seen->promql))
      if (series["metric"].value("probe", "") == "syscall:getppid" && std::stod(series["value"][1].get<std::string>()) > 0)
        return true;
    return false;
  }, 30s)) << kept_vs_seen->promql << "\n" << prom.query(kept_vs_seen->promql).dump();
  EXPECT_EQ(d.terminate(), 0) << d.log();
}

}  // namespace

namespace {

// Issue 12, container-aware probes: "containers" are processes in their own mount namespace
// (tests/support/container.h) with a directory bind-mounted over /usr/local/bin, each in a
// kubelet-layout cgroup, so /usr/local/bin/app is a different file in each.
class ContainerProbeTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (IsSkipped()) return;
    if (!fs::is_directory(kBin)) GTEST_SKIP() << kBin << " does not exist to bind-mount over";
    MCP_CGROUP_TREE_OR_SKIP(tree_, "mcp-ctr-");
  }
  // A directory holding `app`, a copy of the workload of its own (its own inode).
  fs::path image(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    fs::copy_file(kWorkload, d / "app");
    return d;
  }
  static uint64_t ino(const fs::path& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  // A container of the pod with this uid (the systemd driver's layout), `id` its 64-hex id.
  fs::path container_cgroup(const std::string& uid, char id) {
    std::string escaped = uid;
    std::replace(escaped.begin(), escaped.end(), '-', '_');
    return tree_->add("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + escaped +
                      ".slice/cri-containerd-" + std::string(64, id) + ".scope");
  }
  std::unique_ptr<mcp::test::FakeContainer> start(const fs::path& cgroup, const fs::path& image, int calls) {
    return std::make_unique<mcp::test::FakeContainer>(
        cgroup, std::vector<mcp::test::FakeContainer::Bind>{{image, kBin}},
        std::vector<std::string>{kBin + "/app", "calls", std::to_string(calls)});
  }
  uint64_t cgroup_id(const fs::path& p) const { return mcp::cgroup::resolve_cgroup_id(p.string(), tree_->mount()); }
  // Uprobe events by service, then by cgroup id.
  static std::map<std::string, std::map<uint64_t, int>> by_service(const std::vector<nlohmann::json>& events) {
    std::map<std::string, std::map<uint64_t, int>> out;
    for (const auto& e : events)
      if (e["kind"] == "uprobe") out[e.value("service", "")][e["cgroup_id"].get<uint64_t>()]++;
    return out;
  }
  std::string api_config(const mcp::test::FakeApiServer& api) const {
    return "version: 1\nnode_name: node-test\nmetrics:\n  listen: 127.0.0.1:0\n"
           "kubernetes:\n  api_server: " + api.url() + "\n  token_file: " + api.token_file() +
           "\n  ca_file: " + api.ca_file() + "\n";
  }
  static std::string probe(const std::string& service, const std::string& container) {
    return "  - binary: " + kBin + "/app\n    symbol: mcp_work\n    service: " + service +
           "\n    container: " + container + "\n";
  }

  static inline const std::string kBin = "/usr/local/bin";
  std::unique_ptr<mcp::test::CgroupTree> tree_;
};

// Pod uids and container ids of these tests only: ctest may run other pod tests at the same time.
const std::string kUidA = "4e7b5bed-5bd4-44a5-b66a-3349a6ffd75a";
const std::string kUidB = "5f8c6cfe-6ce5-55b6-c77b-445ab7001e6b";
const std::string kUidC = "6a9d7d0f-7df6-66c7-d88c-556bc8112f7c";
const std::string kUidD = "7b0e8e1a-8e07-77d8-e99d-667cd9223a8d";
const std::string kUidE = "8c1f9f2b-9f18-88e9-faae-778dea334b9e";
const std::string kUidF = "9d2a0a3c-a029-99fa-0bbf-889efb445caf";
const std::string kUidG = "ae3b1b4d-b13a-aa0b-1cc0-99a00c556db0";
const std::string kUidH = "bf4c2c5e-c24b-bb1c-2dd1-aab11d667ec1";

// Pods A and B run different files at /usr/local/bin/app; pod C runs A's very file (one
// inode). The probe naming pod A sees exactly A's calls, the one naming pod B exactly B's,
// and C's calls, on a file the probe of A is attached to, reach neither.
TEST_F(ContainerProbeTest, ProbeOnAPodSeesOnlyItsContainersEvenWhereAnotherRunsTheSameFile) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  using mcp::test::FakeApiServer;
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("shop", "web-a", kUidA, "node-test", {}, {{"app", std::string(64, '1')}}));
  api.put_pod(FakeApiServer::make_pod("shop", "web-b", kUidB, "node-test", {}, {{"app", std::string(64, '2')}}));
  api.put_pod(FakeApiServer::make_pod("other", "web-c", kUidC, "node-test", {}, {{"app", std::string(64, '3')}}));
  const fs::path image_a = image("a"), image_b = image("b");
  const fs::path cg_a = container_cgroup(kUidA, '1'), cg_b = container_cgroup(kUidB, '2'), cg_c = container_cgroup(kUidC, '3');
  auto a = start(cg_a, image_a, 30);
  auto b = start(cg_b, image_b, 20);
  auto c = start(cg_c, image_a, 40);
  cm_->update(api_config(api) + "probes:\n" + probe("a", "{pod: shop/web-a}") + probe("b", "{pod: shop/web-b}"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  // Attached before the agent said ready: once per file, each where its pod runs it.
  const std::string log = d.log();
  EXPECT_NE(log.find("probe /usr/local/bin/app:mcp_work in pod shop/web-a: attached to /usr/local/bin/app in container "
                     "111111111111 of pod shop/web-a (device "),
            std::string::npos) << log;
  EXPECT_NE(log.find("inode " + std::to_string(ino(image_a / "app")) + ")"), std::string::npos) << log;
  EXPECT_NE(log.find("inode " + std::to_string(ino(image_b / "app")) + ")"), std::string::npos) << log;
  EXPECT_EQ(count(log, ": attached to /usr/local/bin/app in container"), 2u) << "one file per probe: " << log;
  // C first: by the time A's and B's calls are all delivered, any of C's would be too.
  ASSERT_EQ(c->run(), 0);
  ASSERT_EQ(b->run(), 0);
  ASSERT_EQ(a->run(), 0);
  ASSERT_TRUE(wait_until([&] {
    const auto s = by_service(d.events());
    return s.count("a") && s.at("a").count(cgroup_id(cg_a)) && s.at("a").at(cgroup_id(cg_a)) == 30 &&
           s.count("b") && s.at("b").count(cgroup_id(cg_b)) && s.at("b").at(cgroup_id(cg_b)) == 20;
  })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto s = by_service(d.events());
  EXPECT_EQ(s.at("a"), (std::map<uint64_t, int>{{cgroup_id(cg_a), 30}})) << "nothing from pod C's container";
  EXPECT_EQ(s.at("b"), (std::map<uint64_t, int>{{cgroup_id(cg_b), 20}}));
  EXPECT_EQ(s.size(), 2u);
  for (const auto& e : d.events())
    if (e["kind"] == "uprobe") EXPECT_EQ(e["probe"], "/usr/local/bin/app:mcp_work") << e.dump();
}

// One table holds every cgroup scope (bpf/maps.bpf.h scope_cgroups): a container probe's
// containers (its probe id) and the pods' tenants (probe id 0), the control loop its one
// writer, re-resolving the pod tenants on its ticks. The probe on namespace shop sees both
// pods' containers; pod web-f's tenant quota (burst 5 per CPU, 1/s) holds its 300 calls to
// little more than the bursts, while web-g's own, large quota keeps each of its 50.
TEST_F(ContainerProbeTest, PodQuotaHoldsAContainerProbesCallsWithBothInTheOneScopeTable) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  using mcp::test::FakeApiServer;
  // The two pods' tenant ids must not share a quota bucket (a fixed property of the names).
  ASSERT_NE(mcp::control::tenant_bucket(mcp::control::pod_ref_tenant_id({"shop", "web-f"})),
            mcp::control::tenant_bucket(mcp::control::pod_ref_tenant_id({"shop", "web-g"})));
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("shop", "web-f", kUidF, "node-test", {}, {{"app", std::string(64, '6')}}));
  api.put_pod(FakeApiServer::make_pod("shop", "web-g", kUidG, "node-test", {}, {{"app", std::string(64, '7')}}));
  const fs::path image_a = image("a");
  const fs::path cg_f = container_cgroup(kUidF, '6'), cg_g = container_cgroup(kUidG, '7');
  auto f = start(cg_f, image_a, 300);
  auto g = start(cg_g, image_a, 50);
  cm_->update(api_config(api) + "probes:\n" + probe("a", "{namespace: shop}") +
              "quotas:\n  tenants:\n    - { pod: shop/web-f, rate: 1, burst: 5 }\n"
              "    - { pod: shop/web-g, rate: 1000000 }\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  // web-f first: by the time web-g's calls are all delivered, all of web-f's kept ones are too.
  ASSERT_EQ(f->run(), 0);
  ASSERT_EQ(g->run(), 0);
  ASSERT_TRUE(wait_until([&] { return by_service(d.events())["a"][cgroup_id(cg_g)] == 50; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  auto s = by_service(d.events())["a"];
  const int from_f = s[cgroup_id(cg_f)];
  EXPECT_GE(from_f, 1) << "the probe sees web-f's container";
  // Each CPU's bucket may hold a burst; the run takes seconds at most, at 1/s.
  EXPECT_LE(from_f, 5 * static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)) + 10) << "web-f's quota holds";
  EXPECT_EQ(s.size(), 2u) << "nothing but the two containers";
}

// A process that moves into a cgroup below its container's (as an init system inside the
// container does) is in scope at once: the kernel matches the container's cgroup and every
// cgroup below it, not only the exact cgroups the last /proc scan saw (the next scan, up to a
// second later, would be too late for these 40 calls).
TEST_F(ContainerProbeTest, AProcessMovedBelowItsContainersCgroupIsInScopeBeforeTheNextScan) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  using mcp::test::FakeApiServer;
  FakeApiServer api(dir_ / "apiserver");
  api.put_pod(FakeApiServer::make_pod("shop", "web-h", kUidH, "node-test", {}, {{"app", std::string(64, '8')}}));
  const fs::path image_a = image("a");
  const fs::path cg_h = container_cgroup(kUidH, '8');
  const fs::path sub = tree_->add(fs::relative(cg_h, tree_->root()).string() + "/init.scope");
  auto h = start(cg_h, image_a, 40);
  cm_->update(api_config(api) + "probes:\n" + probe("a", "{pod: shop/web-h}"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_NE(d.log().find("attached to /usr/local/bin/app in container 888888888888 of pod shop/web-h"), std::string::npos)
      << d.log();
  {
    std::ofstream procs(sub / "cgroup.procs");
    procs << h->pid() << std::flush;
    ASSERT_TRUE(procs.good()) << "cannot move the container's process into " << sub;
  }
  ASSERT_EQ(h->run(), 0);
  ASSERT_TRUE(wait_until([&] { return by_service(d.events())["a"][cgroup_id(sub)] == 40; })) << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(by_service(d.events())["a"], (std::map<uint64_t, int>{{cgroup_id(sub), 40}}));
}

// A pod scheduled after the agent is ready: named through the watch, its container found by the
// periodic /proc scan and attached (the test waits for that line, then lets the container
// run); once its container has exited, the file is detached.
TEST_F(ContainerProbeTest, ContainerStartedAfterReadinessIsPickedUpAndDetachedWhenItsLastProcessGoes) {
  if (!mcp::test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  using mcp::test::FakeApiServer;
  FakeApiServer api(dir_ / "apiserver");
  cm_->update(api_config(api) + "probes:\n" + probe("a", "{namespace: shop}"));
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  EXPECT_NE(d.log().find("probe /usr/local/bin/app:mcp_work in namespace shop waiting: no container in namespace shop "
                         "has /usr/local/bin/app (yet)"),
            std::string::npos) << d.log();
  api.put_pod(FakeApiServer::make_pod("shop", "web-d", kUidD, "node-test", {}, {{"app", std::string(64, '4')}}));
  const fs::path image_a = image("a"), cg_a = container_cgroup(kUidD, '4');
  auto a = start(cg_a, image_a, 25);
  const std::string file = "inode " + std::to_string(ino(image_a / "app")) + "\\)";
  ASSERT_TRUE(d.wait_log(std::regex("attached to /usr/local/bin/app in container 4{12} of pod shop/web-d \\(device [0-9]+:[0-9]+, " + file)))
      << d.log();
  ASSERT_EQ(a->run(), 0);
  ASSERT_TRUE(wait_until([&] { return count_uprobe_events(d.events()) >= 25; })) << d.log();
  ASSERT_TRUE(d.wait_log(std::regex("detached from /usr/local/bin/app of container 4{12} of pod shop/web-d \\(device [0-9]+:[0-9]+, " +
                                    file + ": no matching container has it or runs it any more")))
      << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  EXPECT_EQ(by_service(d.events())["a"], (std::map<uint64_t, int>{{cgroup_id(cg_a), 25}}));
}

// Outside a cluster: `container: {}` (any container) works, a probe naming a pod says once
// why it cannot, a path no container has waits (said once), and the agent runs on. The
// any-container probe sees the container's calls and not a host process running the same file.
TEST_F(ContainerProbeTest, WithoutApiAccessOnlyAnyContainerWorksAndAnAbsentPathIsReportedOnce) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  const fs::path image_a = image("a");
  const fs::path cg = tree_->add("kubepods/besteffort/pod" + kUidE + "/" + std::string(64, '5'));  // cgroupfs driver
  auto x = start(cg, image_a, 15);
  cm_->update("version: 1\nmetrics:\n  listen: 127.0.0.1:0\nprobes:\n" + probe("any", "{}") +
              probe("named", "{pod: shop/web-a}") +
              "  - binary: /opt/mcp-absent/app\n    symbol: mcp_work\n    container: {}\n");
  Daemon d(cm_->config_path(), dir_);
  ASSERT_GT(d.port(), 0) << d.log();
  EXPECT_NE(d.log().find("probe /usr/local/bin/app:mcp_work in containers: attached to /usr/local/bin/app in container 5"),
            std::string::npos) << d.log();
  // The host runs the very file the container runs: not a container, not in scope.
  ASSERT_EQ(std::system(((image_a / "app").string() + " calls 10 >/dev/null").c_str()), 0);
  ASSERT_EQ(x->run(), 0);
  ASSERT_TRUE(wait_until([&] { return by_service(d.events())["any"][cgroup_id(cg)] == 15; })) << d.log();
  // Refreshes went on meanwhile (this detach is one): a waiting probe said again would show.
  ASSERT_TRUE(d.wait_log(std::regex("probe /usr/local/bin/app:mcp_work in containers: detached from /usr/local/bin/app of "
                                    "container 5{12} of pod " + kUidE)))
      << d.log();
  EXPECT_EQ(d.terminate(), 0) << d.log();
  const auto s = by_service(d.events());
  EXPECT_EQ(s.count("named"), 0u);
  // Other tests' containers may be in scope too (any container), never a host process.
  for (const auto& e : d.events())
    if (e["kind"] == "uprobe") EXPECT_NE(e.value("container_id", ""), "") << e.dump();
  const std::string log = d.log();
  EXPECT_EQ(count(log, "probe /usr/local/bin/app:mcp_work in pod shop/web-a waiting: pod names unavailable (not in a "
                       "cluster"),
            1u) << log;
  EXPECT_NE(log.find("container: {pod|namespace} needs the pod watch; only container: {} works without it"),
            std::string::npos) << log;
  EXPECT_EQ(count(log, "probe /opt/mcp-absent/app:mcp_work in containers waiting: no container has /opt/mcp-absent/app (yet)"),
            1u) << log;
}

}  // namespace
