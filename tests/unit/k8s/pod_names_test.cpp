// Pod names on events: the Pod object's identity (PodInfo), and PodNames filling pod,
// namespace, container and the configured labels from a watch on the fake API server over
// real TLS, or saying once why it cannot.
#include "k8s/pod_names.h"

#include <gtest/gtest.h>

#include <thread>

#include "../../support/fake_apiserver.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using mcp::test::FakeApiServer;
using nlohmann::json;

const std::string kUid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
const std::string kIdA(64, 'a'), kIdB(64, 'b');

TEST(PodInfo, NamesContainersOfEveryRuntimeAndKeepsOnlyTheConfiguredLabels) {
  json pod = FakeApiServer::make_pod("shop", "web-1", kUid, "node-a", {{"app", "web"}, {"tier", "front"}, {"x", "y"}});
  pod["status"]["containerStatuses"] = json::array({
      {{"name", "app"}, {"containerID", "containerd://" + kIdA}},
      {{"name", "proxy"}, {"containerID", "cri-o://" + kIdB}},
      {{"name", "starting"}},  // no id until it runs
  });
  pod["status"]["initContainerStatuses"] = json::array({{{"name", "init"}, {"containerID", "docker://cafe"}}});
  const auto p = mcp::k8s::pod_info_from_json(pod, {"tier", "app", "absent"});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->uid, kUid);
  EXPECT_EQ(p->name, "web-1");
  EXPECT_EQ(p->ns, "shop");
  EXPECT_EQ(p->labels, (std::vector<std::pair<std::string, std::string>>{{"app", "web"}, {"tier", "front"}}));
  EXPECT_EQ(p->container_name(kIdA), "app");
  EXPECT_EQ(p->container_name(kIdB), "proxy");
  EXPECT_EQ(p->container_name("cafe"), "init");
  EXPECT_EQ(p->container_name("starting"), "");
  EXPECT_FALSE(mcp::k8s::pod_info_from_json(json{{"metadata", {{"name", "no-uid"}}}}, {}));
  EXPECT_FALSE(mcp::k8s::pod_info_from_json(json::array(), {}));
}

mcp::Event pod_event(uint64_t cgroup, const std::string& container_id) {
  mcp::Event e;
  e.cgroup_id = cgroup;
  e.pod_uid = kUid;
  e.container_id = container_id;
  return e;
}

TEST(PodNames, WithoutApiAccessEventsKeepTheirIdsAndItIsSaidOnce) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  std::vector<std::string> warnings;
  mcp::k8s::PodNames names({}, [&](const std::string& w) { warnings.push_back(w); });
  names.start();
  EXPECT_FALSE(names.wait_synced(0ms));
  mcp::Event outside;
  names.enrich(outside);
  EXPECT_TRUE(warnings.empty()) << "an event outside pods says nothing";
  for (int i = 0; i < 3; i++) {
    auto e = pod_event(100 + i, kIdA);
    names.enrich(e);
    EXPECT_EQ(e.pod_uid, kUid);
    EXPECT_EQ(e.pod, "");
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("pod names unavailable: not in a cluster"), std::string::npos) << warnings[0];
}

TEST(PodNames, NamesComeFromTheNodesPodsAndFollowTheWatch) {
  if (!FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  const fs::path dir = fs::temp_directory_path() / ("mcp-podnames-" + std::to_string(getpid()));
  FakeApiServer api(dir);
  api.put_pod(FakeApiServer::make_pod("shop", "web-1", kUid, "node-a", {{"app", "web"}}, {{"app", kIdA}}));
  api.put_pod(FakeApiServer::make_pod("shop", "other-node", "2c5f39cb-3fb2-22e3-994f-1127e4ddb538", "node-b"));
  mcp::k8s::PodNames names({{api.url(), api.token_file(), api.ca_file()}, "node-a", {"app"}});
  names.start();
  ASSERT_TRUE(names.wait_synced(10s)) << names.unavailable();
  EXPECT_EQ(names.directory().size(), 1u);
  auto a = pod_event(7, kIdA);
  names.enrich(a);
  EXPECT_EQ(a.pod, "web-1");
  EXPECT_EQ(a.pod_namespace, "shop");
  EXPECT_EQ(a.container, "app");
  EXPECT_EQ(a.pod_labels, (std::vector<std::pair<std::string, std::string>>{{"app", "web"}}));
  // A sidecar starts: its events are named once the pod's status lists it.
  auto b = pod_event(8, kIdB);
  names.enrich(b);
  EXPECT_EQ(b.pod, "web-1");
  EXPECT_EQ(b.container, "");
  api.put_pod(FakeApiServer::make_pod("shop", "web-1", kUid, "node-a", {{"app", "web"}}, {{"app", kIdA}, {"sidecar", kIdB}}));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    b = pod_event(8, kIdB);
    names.enrich(b);
  } while (b.container.empty() && std::chrono::steady_clock::now() < deadline && (std::this_thread::sleep_for(5ms), true));
  EXPECT_EQ(b.container, "sidecar");
  fs::remove_all(dir);
}

}  // namespace
