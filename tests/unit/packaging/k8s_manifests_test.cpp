// Parses every manifest under packaging/k8s (multi-document YAML) and checks the fields the
// agent depends on at run time: host PID, the host mounts, capabilities matching what the
// agent keeps, probes on the metrics port, the ConfigMap key, the CRD's bounds, RBAC.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>

#include "metrics/server.h"
#ifdef MCP_HAVE_CONFIG
#include "config/parse_config.h"
#endif
#include "privilege/privilege.h"
#include "test_util.h"

namespace mcp::packaging_test {
namespace {

namespace fs = std::filesystem;

const fs::path kK8sDir = source_dir() / "packaging/k8s";

struct Manifests {
  std::vector<YAML::Node> docs;
  std::vector<std::string> files;

  Manifests() {
    for (const auto& entry : fs::directory_iterator(kK8sDir)) {
      if (entry.path().extension() != ".yaml") continue;
      files.push_back(entry.path().filename().string());
      for (auto& doc : YAML::LoadAllFromFile(entry.path().string())) {
        if (doc && !doc.IsNull()) docs.push_back(doc);
      }
    }
  }
  static std::string name_of(const YAML::Node& d) {
    return d["metadata"] && d["metadata"]["name"] ? d["metadata"]["name"].as<std::string>() : "";
  }
  YAML::Node find(const std::string& kind, const std::string& name) const {
    for (const auto& d : docs) {
      if (d["kind"].as<std::string>("") == kind && name_of(d) == name) return d;
    }
    return YAML::Node();
  }
  std::vector<YAML::Node> all(const std::string& kind) const {
    std::vector<YAML::Node> out;
    for (const auto& d : docs)
      if (d["kind"].as<std::string>("") == kind) out.push_back(d);
    return out;
  }
};

const Manifests& manifests() {
  static const Manifests m;
  return m;
}

YAML::Node agent_daemonset() { return manifests().find("DaemonSet", "mcp-agent"); }
YAML::Node agent_container() {
  for (const auto& c : agent_daemonset()["spec"]["template"]["spec"]["containers"])
    if (c["name"].as<std::string>() == "mcp-agent") return c;
  return YAML::Node();
}

// Resolves a probe's port (number or container port name) to a number.
int resolve_port(const YAML::Node& container, const YAML::Node& port) {
  int number = 0;
  if (YAML::convert<int>::decode(port, number)) return number;
  for (const auto& p : container["ports"])
    if (p["name"].as<std::string>("") == port.as<std::string>()) return p["containerPort"].as<int>();
  return -1;
}

TEST(K8sManifests, EveryFileParsesAndEveryObjectIsNamedAndPlaced) {
  const auto& m = manifests();
  ASSERT_GE(m.files.size(), 6u);
  ASSERT_GE(m.docs.size(), 10u);
  const std::set<std::string> cluster_scoped{"Namespace", "ClusterRole", "ClusterRoleBinding",
                                             "CustomResourceDefinition", "Kustomization"};
  for (const auto& d : m.docs) {
    ASSERT_TRUE(d.IsMap());
    std::string kind = d["kind"].as<std::string>("");
    EXPECT_FALSE(kind.empty());
    EXPECT_FALSE(d["apiVersion"].as<std::string>("").empty()) << kind;
    if (kind == "Kustomization") continue;
    EXPECT_FALSE(d["metadata"]["name"].as<std::string>("").empty()) << kind;
    if (!cluster_scoped.count(kind) && kind != "SamplingPolicy") {
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(""), "mcp-system")
          << kind << "/" << d["metadata"]["name"];
    }
  }
}

TEST(K8sManifests, KustomizationListsEveryManifestThatExists) {
  auto k = manifests().find("Kustomization", "");
  ASSERT_TRUE(k) << "kustomization.yaml missing";
  for (const auto& r : k["resources"]) {
    EXPECT_TRUE(fs::exists(kK8sDir / r.as<std::string>())) << r.as<std::string>();
  }
  EXPECT_GE(k["resources"].size(), 6u);
}

TEST(K8sAgentDaemonSet, SharesTheHostPidNamespace) {
  auto ds = agent_daemonset();
  ASSERT_TRUE(ds);
  EXPECT_TRUE(ds["spec"]["template"]["spec"]["hostPID"].as<bool>(false));
}

TEST(K8sAgentDaemonSet, MountsTheHostPathsTheAgentReads) {
  auto pod = agent_daemonset()["spec"]["template"]["spec"];
  std::map<std::string, YAML::Node> volumes;
  for (const auto& v : pod["volumes"]) volumes[v["name"].as<std::string>()] = static_cast<const YAML::Node&>(v);
  std::map<std::string, std::string> mounted;  // mountPath -> host path or "configmap:NAME"
  for (const auto& vm : agent_container()["volumeMounts"]) {
    auto v = volumes[vm["name"].as<std::string>()];
    ASSERT_TRUE(v) << "volumeMount " << vm["name"].as<std::string>() << " has no volume";
    std::string source = v["hostPath"] ? v["hostPath"]["path"].as<std::string>()
                         : v["configMap"] ? "configmap:" + v["configMap"]["name"].as<std::string>()
                                          : "other";
    mounted[vm["mountPath"].as<std::string>()] = source;
  }
  for (std::string path : {"/sys/kernel/btf", "/sys/fs/bpf", "/sys/kernel/tracing", "/sys/fs/cgroup"}) {
    EXPECT_EQ(mounted[path], path) << path << " must be the host's";
  }
  EXPECT_EQ(mounted["/host/proc"], "/proc");
  EXPECT_EQ(mounted["/etc/mcp-agent"], "configmap:mcp-agent-config");
}

TEST(K8sAgentDaemonSet, CapabilitiesCoverWhatTheAgentKeeps) {
  auto sc = agent_container()["securityContext"];
  ASSERT_TRUE(sc);
  if (sc["privileged"].as<bool>(false)) return;  // privileged has every capability
  std::set<std::string> added;
  for (const auto& c : sc["capabilities"]["add"]) added.insert(c.as<std::string>());
  for (auto cap : privilege::runtime_capabilities({6, 1})) {
    std::string name = privilege::capability_name(cap).substr(4);  // strip "cap_"
    std::transform(name.begin(), name.end(), name.begin(), ::toupper);
    EXPECT_TRUE(added.count(name)) << name << " not added";
  }
  for (std::string broad : {"NET_ADMIN", "SYS_MODULE", "DAC_OVERRIDE", "SYS_RAWIO"}) EXPECT_FALSE(added.count(broad)) << broad;
  std::set<std::string> dropped;
  for (const auto& c : sc["capabilities"]["drop"]) dropped.insert(c.as<std::string>());
  EXPECT_TRUE(dropped.count("ALL")) << "start from nothing, add what is needed";
  EXPECT_EQ(sc["runAsUser"].as<int>(-1), 0);
}

TEST(K8sAgentDaemonSet, ProbesHitHealthzOnTheMetricsPort) {
  auto c = agent_container();
  int metrics_port = -1;
  for (const auto& p : c["ports"])
    if (p["name"].as<std::string>("") == "metrics") metrics_port = p["containerPort"].as<int>();
  EXPECT_EQ(metrics_port, metrics::kDefaultPort);
  for (std::string probe : {"livenessProbe", "readinessProbe"}) {
    auto get = c[probe]["httpGet"];
    ASSERT_TRUE(get) << probe;
    EXPECT_EQ(get["path"].as<std::string>(), "/healthz") << probe;
    EXPECT_EQ(resolve_port(c, get["port"]), metrics_port) << probe;
  }
}

TEST(K8sAgentDaemonSet, HasResourceLimitsAndTheNodeName) {
  auto c = agent_container();
  EXPECT_TRUE(c["resources"]["limits"]["cpu"]);
  EXPECT_TRUE(c["resources"]["limits"]["memory"]);
  EXPECT_TRUE(c["resources"]["requests"]["memory"]);
  bool node_name = false;
  for (const auto& e : c["env"]) {
    if (e["name"].as<std::string>() == "NODE_NAME") {
      node_name = e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>("") == "spec.nodeName";
    }
  }
  EXPECT_TRUE(node_name);
  auto cmd = c["command"].as<std::vector<std::string>>();
  EXPECT_EQ(cmd, (std::vector<std::string>{"/usr/bin/mcp-agent", "run", "--config",
                                           "/etc/mcp-agent/agent.yaml"}));
}

TEST(K8sConfigMap, HoldsAgentYamlWhoseMetricsListenerTheProbesCanReach) {
  auto cm = manifests().find("ConfigMap", "mcp-agent-config");
  ASSERT_TRUE(cm);
  ASSERT_TRUE(cm["data"]["agent.yaml"]) << "key must be agent.yaml: the agent reads /etc/mcp-agent/agent.yaml";
  YAML::Node config = YAML::Load(cm["data"]["agent.yaml"].as<std::string>());
  ASSERT_TRUE(config.IsMap());
  // The kubelet probes the pod IP, so the listener cannot be loopback inside the pod.
  auto listen = metrics::parse_listen_address(config["metrics"]["listen"].as<std::string>());
  EXPECT_EQ(listen.port, metrics::kDefaultPort);
  EXPECT_NE(listen.host, "127.0.0.1");
  // The broker address is the in-cluster Service on its port.
  auto svc = manifests().find("Service", "mcp-broker");
  ASSERT_TRUE(svc);
  std::string want = "mcp-broker.mcp-system.svc:" + svc["spec"]["ports"][0]["port"].as<std::string>();
  auto addresses = config["broker"]["addresses"].as<std::vector<std::string>>();
  EXPECT_EQ(addresses, std::vector<std::string>{want});
}

#ifdef MCP_HAVE_CONFIG
TEST(K8sConfigMap, AgentYamlPassesTheAgentsOwnValidation) {
  auto cm = manifests().find("ConfigMap", "mcp-agent-config");
  ASSERT_TRUE(cm);
  try {
    auto cfg = config::parse_config(cm["data"]["agent.yaml"].as<std::string>(), "configmap.yaml");
    EXPECT_EQ(metrics::parse_listen_address(cfg.metrics_listen).port, metrics::kDefaultPort);
  } catch (const config::ConfigError& e) {
    std::string all;
    for (const auto& d : e.diagnostics()) all += d.str() + "\n";
    FAIL() << "the ConfigMap's agent.yaml is rejected by the agent:\n" << all;
  }
}
#endif

YAML::Node crd_spec_schema() {
  auto crd = manifests().find("CustomResourceDefinition", "samplingpolicies.sampling.mcp.dev");
  if (!crd) return YAML::Node();
  return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
}

TEST(K8sSamplingPolicyCrd, SchemaBoundsSamplingRateAndDescribesWeights) {
  auto crd = manifests().find("CustomResourceDefinition", "samplingpolicies.sampling.mcp.dev");
  ASSERT_TRUE(crd);
  EXPECT_EQ(crd["apiVersion"].as<std::string>(), "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["spec"]["names"]["kind"].as<std::string>(), "SamplingPolicy");
  auto spec = crd_spec_schema();
  auto props = spec["properties"];
  EXPECT_EQ(props["samplingRate"]["type"].as<std::string>(), "number");
  EXPECT_EQ(props["samplingRate"]["minimum"].as<double>(), 0.0);
  EXPECT_EQ(props["samplingRate"]["maximum"].as<double>(), 1.0);
  EXPECT_EQ(props["targetQps"]["minimum"].as<double>(), 0.0);
  EXPECT_EQ(props["service"]["type"].as<std::string>(), "string");
  EXPECT_EQ(props["probe"]["type"].as<std::string>(), "string");
  auto strategies = props["strategy"]["enum"].as<std::vector<std::string>>();
  EXPECT_NE(std::find(strategies.begin(), strategies.end(), "weighted"), strategies.end());
  EXPECT_EQ(props["weights"]["additionalProperties"]["type"].as<std::string>(), "integer");
  auto required = spec["required"].as<std::vector<std::string>>();
  EXPECT_NE(std::find(required.begin(), required.end(), "service"), required.end());
}

TEST(K8sSamplingPolicyCrd, ExamplePolicyFitsTheSchema) {
  auto props = crd_spec_schema()["properties"];
  auto policies = manifests().all("SamplingPolicy");
  ASSERT_FALSE(policies.empty());
  for (const auto& p : policies) {
    auto spec = p["spec"];
    for (const auto& kv : spec) {
      std::string field = kv.first.as<std::string>();
      ASSERT_TRUE(props[field]) << "field " << field << " not in the CRD schema";
      if (props[field]["minimum"]) EXPECT_GE(kv.second.as<double>(), props[field]["minimum"].as<double>());
      if (props[field]["maximum"]) EXPECT_LE(kv.second.as<double>(), props[field]["maximum"].as<double>());
    }
    if (spec["strategy"].as<std::string>("") == "weighted") {
      int sum = 0;
      for (const auto& w : spec["weights"]) sum += w.second.as<int>();
      EXPECT_EQ(sum, 100);
    }
  }
}

TEST(K8sRbac, AgentAccountMayOnlyReadPods) {
  const auto& m = manifests();
  std::string sa = agent_daemonset()["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>();
  ASSERT_TRUE(m.find("ServiceAccount", sa));
  std::string role;
  for (const auto& b : m.all("ClusterRoleBinding")) {
    for (const auto& s : b["subjects"]) {
      if (s["kind"].as<std::string>() == "ServiceAccount" && s["name"].as<std::string>() == sa &&
          s["namespace"].as<std::string>() == "mcp-system") {
        role = b["roleRef"]["name"].as<std::string>();
      }
    }
  }
  auto cr = m.find("ClusterRole", role);
  ASSERT_TRUE(cr) << "no ClusterRole bound to " << sa;
  const std::string crd_group =
      m.find("CustomResourceDefinition", "samplingpolicies.sampling.mcp.dev")["spec"]["group"].as<std::string>();
  auto allowed = [&](const std::string& group, const std::string& resource, const std::string& verb) {
    for (const auto& r : cr["rules"]) {
      auto groups = r["apiGroups"].as<std::vector<std::string>>();
      auto resources = r["resources"].as<std::vector<std::string>>();
      auto verbs = r["verbs"].as<std::vector<std::string>>();
      if (std::count(groups.begin(), groups.end(), group) &&
          std::count(resources.begin(), resources.end(), resource) &&
          std::count(verbs.begin(), verbs.end(), verb))
        return true;
    }
    return false;
  };
  for (std::string verb : {"get", "list", "watch"}) {
    EXPECT_TRUE(allowed("", "pods", verb)) << verb;  // the pod watch (agent/k8s/pod_names.h)
    EXPECT_FALSE(allowed(crd_group, "samplingpolicies", verb)) << verb << ": the agent reads no policies";
    EXPECT_FALSE(allowed("", "nodes", verb)) << verb;
  }
  EXPECT_FALSE(allowed("", "secrets", "get"));
  EXPECT_FALSE(allowed("", "pods", "delete"));
}

TEST(K8sBroker, ServiceSelectsTheDeploymentOnPort9090) {
  auto dep = manifests().find("Deployment", "mcp-broker");
  auto svc = manifests().find("Service", "mcp-broker");
  ASSERT_TRUE(dep);
  ASSERT_TRUE(svc);
  auto labels = dep["spec"]["template"]["metadata"]["labels"];
  for (const auto& kv : svc["spec"]["selector"]) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  }
  EXPECT_EQ(svc["spec"]["ports"][0]["port"].as<int>(), 9090);
  auto c = dep["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(resolve_port(c, svc["spec"]["ports"][0]["targetPort"]), 9090);
  auto cmd = c["command"].as<std::vector<std::string>>();
  auto listen = std::find(cmd.begin(), cmd.end(), "--listen");
  ASSERT_NE(listen, cmd.end());
  EXPECT_EQ(metrics::parse_listen_address(*(listen + 1)).port, 9090);
}

// Where a container sees key `key` of Secret `secret`: "" when it does not mount it.
std::string secret_key_path(const YAML::Node& pod, const YAML::Node& container, const std::string& secret,
                            const std::string& key) {
  for (const auto& v : pod["volumes"]) {
    if (!v["secret"] || v["secret"]["secretName"].as<std::string>("") != secret) continue;
    for (const auto& vm : container["volumeMounts"]) {
      if (vm["name"].as<std::string>() != v["name"].as<std::string>()) continue;
      for (const auto& item : v["secret"]["items"])
        if (item["key"].as<std::string>() == key)
          return vm["mountPath"].as<std::string>() + "/" + item["path"].as<std::string>();
    }
  }
  return "";
}

TEST(K8sSecret, KustomizeGeneratesOneTokenPerRoleFromUncommittedFiles) {
  auto k = manifests().find("Kustomization", "");
  ASSERT_TRUE(k);
  std::set<std::string> keys;
  for (const auto& g : k["secretGenerator"]) {
    if (g["name"].as<std::string>("") != "mcp-broker-tokens") continue;
    EXPECT_EQ(g["namespace"].as<std::string>(""), "mcp-system");
    for (const auto& f : g["files"]) {
      const std::string entry = f.as<std::string>();
      keys.insert(entry.substr(0, entry.find('=')));
      EXPECT_EQ(entry.substr(entry.find('=') + 1).rfind("tokens/", 0), 0u) << entry;
    }
  }
  // No publish token: a token every agent shares would let one node publish as another.
  EXPECT_EQ(keys, (std::set<std::string>{"subscribe", "policy"}));
  // The generated token files must never be committed.
  std::ifstream ignore(kK8sDir / "tokens/.gitignore");
  std::string text((std::istreambuf_iterator<char>(ignore)), {});
  EXPECT_NE(text.find("*"), std::string::npos) << "tokens/.gitignore must ignore the tokens";
}

TEST(K8sBroker, RequiresATokenPerRoleAndAgentsOwnPodTokensAndIsNeverInsecure) {
  auto dep = manifests().find("Deployment", "mcp-broker");
  ASSERT_TRUE(dep);
  auto pod = dep["spec"]["template"]["spec"];
  auto c = pod["containers"][0];
  auto cmd = c["command"].as<std::vector<std::string>>();
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--insecure"), cmd.end());
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "--agent-token-review"), cmd.end());
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--publish-token-file"), cmd.end()) << "a shared publish token";
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--token-file"), cmd.end()) << "a shared all-roles token";
  for (const std::string role : {"subscribe", "policy"}) {
    auto flag = std::find(cmd.begin(), cmd.end(), "--" + role + "-token-file");
    ASSERT_NE(flag, cmd.end()) << role;
    ASSERT_NE(flag + 1, cmd.end());
    EXPECT_EQ(*(flag + 1), secret_key_path(pod, c, "mcp-broker-tokens", role)) << role;
  }
}

// Per-node identity (broker/k8s/token_review.h): the agent presents its own pod's projected token,
// for the broker's audience (so the broker cannot replay it to the API), where its config reads
// it; it mounts none of the shared role tokens. Defaults of --agent-token-audience and
// --agent-service-account must match what the DaemonSet runs as.
TEST(K8sAgentDaemonSet, PresentsItsOwnPodTokenForTheBrokersAudienceWhereItsConfigReadsIt) {
  auto pod = agent_daemonset()["spec"]["template"]["spec"];
  auto c = agent_container();
  for (const std::string role : {"publish", "subscribe", "policy"})
    EXPECT_EQ(secret_key_path(pod, c, "mcp-broker-tokens", role), "") << role;
  std::string path;
  for (const auto& v : pod["volumes"]) {
    if (!v["projected"]) continue;
    for (const auto& src : v["projected"]["sources"]) {
      auto sat = src["serviceAccountToken"];
      if (!sat) continue;
      EXPECT_EQ(sat["audience"].as<std::string>(""), "mcp-broker");
      EXPECT_LE(sat["expirationSeconds"].as<int>(0), 24 * 3600);
      for (const auto& vm : c["volumeMounts"])
        if (vm["name"].as<std::string>() == v["name"].as<std::string>())
          path = vm["mountPath"].as<std::string>() + "/" + sat["path"].as<std::string>();
    }
  }
  ASSERT_FALSE(path.empty()) << "the agent mounts no projected ServiceAccount token";
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(""), "mcp-agent");
  EXPECT_EQ(agent_daemonset()["metadata"]["namespace"].as<std::string>(""), "mcp-system");
  auto cm = manifests().find("ConfigMap", "mcp-agent-config");
  YAML::Node config = YAML::Load(cm["data"]["agent.yaml"].as<std::string>());
  EXPECT_EQ(config["broker"]["token_file"].as<std::string>(""), path);
  // The agent id the broker allows for a node token is the node's name: the config must not
  // pin one, so $NODE_NAME (spec.nodeName) is used.
  EXPECT_EQ(config["node_name"].as<std::string>(""), "");
}

TEST(K8sNetworkPolicy, OnlyAgentsAndLabelledConsumersReachTheBrokerPort) {
  auto np = manifests().find("NetworkPolicy", "mcp-broker");
  ASSERT_TRUE(np) << "no NetworkPolicy for the broker";
  auto broker_labels = manifests().find("Deployment", "mcp-broker")["spec"]["template"]["metadata"]["labels"];
  for (const auto& kv : np["spec"]["podSelector"]["matchLabels"])
    EXPECT_EQ(broker_labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  EXPECT_FALSE(np["spec"]["podSelector"]["matchLabels"].size() == 0) << "must select the broker only";
  auto types = np["spec"]["policyTypes"].as<std::vector<std::string>>();
  EXPECT_NE(std::find(types.begin(), types.end(), "Ingress"), types.end());
  auto agent_labels = agent_daemonset()["spec"]["template"]["metadata"]["labels"];
  bool agents_allowed = false;
  // One rule opens the gRPC port; any other opens only the metrics port (K8sBroker.Metrics...).
  const auto ingress = np["spec"]["ingress"];
  int grpc_rule = -1;
  for (size_t i = 0; i < ingress.size(); ++i) {
    const auto r = ingress[i];
    ASSERT_EQ(r["ports"].size(), 1u);
    if (r["ports"][0]["port"].as<int>() == 9090) grpc_rule = static_cast<int>(i);
    else EXPECT_EQ(r["ports"][0]["port"].as<int>(), 9464);
  }
  ASSERT_GE(grpc_rule, 0) << "no rule opens the gRPC port";
  auto rule = ingress[static_cast<size_t>(grpc_rule)];
  for (const auto& from : rule["from"]) {
    // Same namespace only: no namespaceSelector, no ipBlock.
    EXPECT_FALSE(from["namespaceSelector"]);
    EXPECT_FALSE(from["ipBlock"]);
    ASSERT_TRUE(from["podSelector"]["matchLabels"]);
    bool all = true;
    for (const auto& kv : from["podSelector"]["matchLabels"])
      all = all && agent_labels[kv.first.as<std::string>()].as<std::string>("") == kv.second.as<std::string>();
    agents_allowed = agents_allowed || all;
  }
  EXPECT_TRUE(agents_allowed) << "the agents cannot reach the broker";
  ASSERT_EQ(rule["ports"].size(), 1u);
  EXPECT_EQ(rule["ports"][0]["port"].as<int>(), 9090);
}

// The broker's SamplingPolicy controller (broker/k8s/policy_controller.h) reads the objects and
// writes their status subresource: exactly that, and the deployment runs it.
// ... and creates TokenReviews for --agent-token-review (broker/k8s/token_review.h).
TEST(K8sRbac, BrokerAccountMayReadPoliciesWriteOnlyTheirStatusAndReviewTokens) {
  const auto& m = manifests();
  auto dep = m.find("Deployment", "mcp-broker");
  ASSERT_TRUE(dep);
  const std::string sa = dep["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>();
  ASSERT_TRUE(m.find("ServiceAccount", sa));
  std::vector<YAML::Node> roles;
  for (const auto& b : m.all("ClusterRoleBinding"))
    for (const auto& s : b["subjects"])
      if (s["kind"].as<std::string>() == "ServiceAccount" && s["name"].as<std::string>() == sa &&
          s["namespace"].as<std::string>() == "mcp-system")
        roles.push_back(m.find("ClusterRole", b["roleRef"]["name"].as<std::string>()));
  ASSERT_EQ(roles.size(), 1u) << "one ClusterRole bound to " << sa;
  const std::string group =
      m.find("CustomResourceDefinition", "samplingpolicies.sampling.mcp.dev")["spec"]["group"].as<std::string>();
  std::set<std::string> grants;  // "group/resource verb"
  for (const auto& r : roles[0]["rules"])
    for (const auto& g : r["apiGroups"])
      for (const auto& res : r["resources"])
        for (const auto& v : r["verbs"])
          grants.insert(g.as<std::string>() + "/" + res.as<std::string>() + " " + v.as<std::string>());
  const std::set<std::string> want{group + "/samplingpolicies get", group + "/samplingpolicies list",
                                   group + "/samplingpolicies watch", group + "/samplingpolicies/status update",
                                   group + "/samplingpolicies/status patch",
                                   "authentication.k8s.io/tokenreviews create"};
  EXPECT_EQ(grants, want);
  auto cmd = dep["spec"]["template"]["spec"]["containers"][0]["command"].as<std::vector<std::string>>();
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "--k8s-policies"), cmd.end()) << "the broker runs no controller";
}

TEST(K8sSamplingPolicyCrd, HasTheControllersConditionsAndStatus) {
  auto crd = manifests().find("CustomResourceDefinition", "samplingpolicies.sampling.mcp.dev");
  ASSERT_TRUE(crd);
  auto version = crd["spec"]["versions"][0];
  EXPECT_TRUE(version["subresources"]["status"]) << "status writes need the status subresource";
  auto props = crd_spec_schema()["properties"];
  EXPECT_EQ(props["serviceLabels"]["additionalProperties"]["type"].as<std::string>(), "string");
  EXPECT_EQ(props["qpsThreshold"]["type"].as<std::string>(), "number");
  EXPECT_EQ(props["qpsThreshold"]["minimum"].as<double>(), 0.0);
  // The pattern admits what the broker validates: hex, 1 to 32 digits (the whole W3C id).
  const std::regex pattern(props["traceIdPrefix"]["pattern"].as<std::string>(), std::regex::extended);
  EXPECT_TRUE(std::regex_match("00AF", pattern));
  EXPECT_TRUE(std::regex_match("0123456789abcdef0123456789abcdef", pattern));
  EXPECT_FALSE(std::regex_match("0123456789abcdef0123456789abcdef0", pattern));
  EXPECT_FALSE(std::regex_match("", pattern));
  EXPECT_FALSE(std::regex_match("xyz", pattern));
  auto status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
  for (const char* field :
       {"observedGeneration", "appliedAgents", "active", "observedQps", "refusedBy", "message", "conditions"})
    EXPECT_TRUE(status[field]) << field;
}

// The broker serves /metrics on the port its command listens on, its container names, its
// scrape annotations point at, and the NetworkPolicy opens (and opens nothing else there).
TEST(K8sBroker, ServesMetricsOnThePortTheAnnotationsAndTheNetworkPolicyName) {
  auto dep = manifests().find("Deployment", "mcp-broker");
  ASSERT_TRUE(dep);
  auto c = dep["spec"]["template"]["spec"]["containers"][0];
  auto cmd = c["command"].as<std::vector<std::string>>();
  auto listen = std::find(cmd.begin(), cmd.end(), "--metrics-listen");
  ASSERT_NE(listen, cmd.end()) << "the broker serves no /metrics";
  const int port = metrics::parse_listen_address(*(listen + 1)).port;
  EXPECT_EQ(resolve_port(c, YAML::Node("metrics")), port);
  auto annotations = dep["spec"]["template"]["metadata"]["annotations"];
  EXPECT_EQ(annotations["prometheus.io/scrape"].as<std::string>(""), "true");
  EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(""), std::to_string(port));
  EXPECT_EQ(annotations["prometheus.io/path"].as<std::string>(""), "/metrics");
  auto np = manifests().find("NetworkPolicy", "mcp-broker");
  bool open = false;
  for (const auto& r : np["spec"]["ingress"])
    for (const auto& p : r["ports"]) open = open || p["port"].as<int>() == port;
  EXPECT_TRUE(open) << "the NetworkPolicy keeps Prometheus from port " << port;
}

// Issue 51: a broker at its connection cap says so on /healthz (503); readiness follows it,
// so the Service sends no new agents to a broker that cannot accept them.
TEST(K8sBroker, ReadinessFollowsHealthzOnTheMetricsPort) {
  auto dep = manifests().find("Deployment", "mcp-broker");
  ASSERT_TRUE(dep);
  auto c = dep["spec"]["template"]["spec"]["containers"][0];
  auto get = c["readinessProbe"]["httpGet"];
  ASSERT_TRUE(get) << "a tcpSocket probe passes while gRPC accepts nothing";
  EXPECT_EQ(get["path"].as<std::string>(), "/healthz");
  EXPECT_EQ(resolve_port(c, get["port"]), resolve_port(c, YAML::Node("metrics")));
}

}  // namespace
}  // namespace mcp::packaging_test
