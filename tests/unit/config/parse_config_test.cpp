#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "config/parse_config.h"
#include "runtime/config_spec.h"
#include "../../support/files.h"

namespace mcp::config {
namespace {

namespace fs = std::filesystem;

TEST(ConfigLoader, ShippedExampleIsValidAndMeansWhatItsCommentsSay) {
  const Config cfg = load_config(MCP_EXAMPLE_CONFIG);
  EXPECT_EQ(cfg.broker.addresses, std::vector<std::string>{"mcp-broker.mcp-system.svc:9090"});
  ASSERT_TRUE(cfg.broker.tls.has_value());
  EXPECT_EQ(cfg.broker.tls->cert, "/etc/mcp-agent/tls/tls.crt");
  EXPECT_EQ(cfg.metrics_listen, "127.0.0.1:9464");
  // 4 uprobes + 2 syscalls; CUDA is disabled so it adds none.
  ASSERT_EQ(cfg.probes.size(), 6u);
  const ProbeSpec& p = cfg.probes[0];
  EXPECT_EQ(p.kind, ProbeKind::kUprobe);
  EXPECT_EQ(p.key(), "uprobe:/usr/local/bin/checkout:handle_order");
  EXPECT_EQ(p.tags, (std::vector<std::pair<std::string, std::string>>{{"version", "v1"}, {"team", "payments"}}));
  ASSERT_TRUE(p.trace_id.has_value());
  EXPECT_EQ(p.trace_id->arg_index, 1);
  EXPECT_EQ(p.trace_id->format, control::TraceIdFormat::kHex32);
  EXPECT_TRUE(p.latency);
  EXPECT_EQ(p.sampling.target_qps, 200.0);
  EXPECT_TRUE(p.sampling.consistent);
  EXPECT_EQ(cfg.probes[1].key(), "uprobe:/usr/local/bin/checkout-v2:handle_order@container=3f9a1c");
  EXPECT_EQ(cfg.probes[2].key(), "uprobe:lib:libssl.so.3:SSL_write");
  EXPECT_EQ(cfg.probes[2].sampling.rate, 0.01);
  EXPECT_EQ(cfg.probes[3].key(), "uprobe:/app/server:handle_request@in-namespace=shop");
  EXPECT_EQ(cfg.probes[3].container, (ContainerScope{"shop", ""}));
  EXPECT_EQ(cfg.probes[4].key(), "syscall:openat");
  EXPECT_EQ(cfg.probes[5].key(), "syscall:connect");
  EXPECT_EQ(cfg.probes[5].sampling.rate, 0.1);
  EXPECT_FALSE(cfg.cuda.enabled);
  EXPECT_EQ(cfg.cuda.slow_launch, std::chrono::milliseconds(5));
  ASSERT_TRUE(cfg.quotas.default_quota.has_value());
  EXPECT_EQ(cfg.quotas.default_quota->burst, 2000);
  ASSERT_EQ(cfg.quotas.tenants.size(), 2u);
  EXPECT_EQ(cfg.quotas.tenants[0].rate, 500);
  EXPECT_EQ(cfg.quotas.tenants[1].pods, (k8s::PodRef{"batch", ""}));
  EXPECT_EQ(cfg.quotas.tenants[1].burst, 200) << "a second's worth";
  EXPECT_EQ(cfg.exporter.sample_rate, 1.0);
  // The comment promises 250 qps split 200 / 50.
  EXPECT_EQ(cfg.version_targets("checkout"),
            (std::vector<VersionTarget>{{"v1", 200.0}, {"v2", 50.0}}));
  EXPECT_EQ(cfg.compliance.rules->size(), 2u);
  EXPECT_EQ(cfg.compliance.rules->rule(0).name, "health_record_anonymization");
  EXPECT_TRUE(cfg.kubernetes.pod_names);
  EXPECT_EQ(cfg.kubernetes.pod_labels, (std::vector<std::string>{"app", "app.kubernetes.io/name"}));
  EXPECT_EQ(cfg.kubernetes.api_server, "") << "in-cluster by default";
}

TEST(ConfigLoader, KubernetesSectionOverridesTheInClusterDefaults) {
  const Config cfg = parse_config(
      "kubernetes:\n  pod_names: false\n  api_server: https://10.0.0.1:6443\n  token_file: sa/token\n"
      "  ca_file: /etc/ca.crt\n  pod_labels: [app, tier]\n",
      "a.yaml", "/etc/mcp-agent");
  EXPECT_FALSE(cfg.kubernetes.pod_names);
  EXPECT_EQ(cfg.kubernetes.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(cfg.kubernetes.token_file, "/etc/mcp-agent/sa/token") << "relative to the file's directory";
  EXPECT_EQ(cfg.kubernetes.ca_file, "/etc/ca.crt");
  EXPECT_EQ(cfg.kubernetes.pod_labels, (std::vector<std::string>{"app", "tier"}));
  try {
    parse_config("kubernetes:\n  api_server: http://10.0.0.1\n  pod_label: [app]\n", "a.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 2u);
    EXPECT_EQ(e.diagnostics()[0].str(), "a.yaml:2:15: kubernetes.api_server must be an https:// URL, found 'http://10.0.0.1'");
    EXPECT_NE(e.diagnostics()[1].str().find("unknown key 'pod_label'"), std::string::npos) << e.diagnostics()[1].str();
  }
}

// `container:` beside `binary`: a pod (NAMESPACE/NAME), a namespace, or {} for any container.
// Each is its own attachment (key), so the same path in two pods is two probes.
TEST(ConfigLoader, ContainerScopesAreSeparateProbesOfTheSamePath) {
  const Config cfg = parse_config(
      "probes:\n"
      "  - {binary: /usr/local/bin/app, symbol: f, container: {pod: shop/web-a}}\n"
      "  - {binary: /usr/local/bin/app, symbol: f, container: {pod: shop/web-b.v2}}\n"
      "  - {binary: /usr/local/bin/app, symbol: f, container: {namespace: shop}}\n"
      "  - {binary: /usr/local/bin/app, symbol: f, container: {}}\n"
      "  - {binary: /usr/local/bin/app, symbol: f}\n",
      "a.yaml");
  ASSERT_EQ(cfg.probes.size(), 5u);
  EXPECT_EQ(cfg.probes[0].container, (ContainerScope{"shop", "web-a"}));
  EXPECT_EQ(cfg.probes[0].container->describe(), "pod shop/web-a");
  EXPECT_EQ(cfg.probes[1].key(), "uprobe:/usr/local/bin/app:f@in-pod=shop/web-b.v2");
  EXPECT_EQ(cfg.probes[2].container->describe(), "namespace shop");
  EXPECT_TRUE(cfg.probes[3].container->any());
  EXPECT_EQ(cfg.probes[3].key(), "uprobe:/usr/local/bin/app:f@in-containers");
  EXPECT_FALSE(cfg.probes[4].container.has_value());
  EXPECT_EQ(cfg.probes[4].key(), "uprobe:/usr/local/bin/app:f");
}

// Tenants and selectors may name pods (`pod: NS/NAME`) or a namespace; each is a key of its
// own, checked as the API server names things, and needs the pod watch.
TEST(ConfigLoader, TenantsAndSelectorsNamePodsAndNamespaces) {
  const Config cfg = parse_config(
      "probes:\n  - { binary: /bin/true, symbol: main, selector: { pod: shop/web-1 } }\n"
      "  - { binary: /bin/true, symbol: main, selector: { namespace: shop } }\n"
      "quotas:\n  tenants:\n    - { namespace: team-a, rate: 100 }\n    - { pod: team-a/web-1, rate: 10, burst: 20 }\n"
      "    - { cgroup_path: /kubepods.slice, rate: 5 }\n",
      "a.yaml");
  ASSERT_EQ(cfg.probes.size(), 2u);
  EXPECT_EQ(cfg.probes[0].selector.pods, (k8s::PodRef{"shop", "web-1"}));
  EXPECT_EQ(cfg.probes[1].selector.pods, (k8s::PodRef{"shop", ""}));
  EXPECT_NE(cfg.probes[0].key(), cfg.probes[1].key()) << "the selector is part of the probe's identity";
  ASSERT_EQ(cfg.quotas.tenants.size(), 3u);
  EXPECT_EQ(cfg.quotas.tenants[0].pods, (k8s::PodRef{"team-a", ""}));
  EXPECT_EQ(cfg.quotas.tenants[0].cgroup_path, "namespace:team-a");
  EXPECT_EQ(cfg.quotas.tenants[1].pods, (k8s::PodRef{"team-a", "web-1"}));
  EXPECT_FALSE(cfg.quotas.tenants[2].pods);
  try {
    parse_config("probes:\n  - binary: /bin/true\n    symbol: main\n    selector: { pod: web-1 }\n"
                 "quotas:\n  tenants:\n    - { namespace: Team_A, rate: 1 }\n"
                 "    - { namespace: a, cgroup_path: /x, rate: 1 }\n    - { namespace: b, rate: 1 }\n"
                 "    - { namespace: b, rate: 2 }\n",
                 "a.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 4u);
    EXPECT_EQ(e.diagnostics()[0].str(), "a.yaml:4:22: selector.pod: pod 'web-1' must be NAMESPACE/NAME");
    EXPECT_EQ(e.diagnostics()[1].str().substr(0, 44), "a.yaml:7:20: tenant.namespace: namespace 'Te") << e.diagnostics()[1].str();
    EXPECT_EQ(e.diagnostics()[2].str(), "a.yaml:8:7: tenant takes one of 'cgroup_path', 'pod' or 'namespace'");
    EXPECT_EQ(e.diagnostics()[3].str(), "a.yaml:10:7: duplicate quota for 'namespace:b' (first at line 9)");
  }
  try {
    parse_config("kubernetes:\n  pod_names: false\nquotas:\n  tenants:\n    - { namespace: team-a, rate: 1 }\n", "a.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].str(),
              "a.yaml:5:20: tenant.namespace needs the pod watch, which kubernetes.pod_names: false turns off");
  }
}

TEST(ConfigLoader, MinimalFileGetsDefaults) {
  const Config cfg = parse_config("syscalls: [openat]\n", "a.yaml");
  EXPECT_EQ(cfg.metrics_listen, kDefaultMetricsListen);
  EXPECT_TRUE(cfg.broker.addresses.empty());
  ASSERT_EQ(cfg.probes.size(), 1u);
  EXPECT_FALSE(cfg.probes[0].sampling.rate.has_value());
  ASSERT_NE(cfg.compliance.rules, nullptr);
  EXPECT_TRUE(cfg.compliance.rules->empty());
  EXPECT_EQ(cfg.exporter.sample_rate, 1.0);
}

TEST(ConfigLoader, UsdtProbeKeepsProviderNameAndItsStringArguments) {
  const Config cfg = parse_config(
      "probes:\n  - binary: /usr/bin/python3.11\n    usdt: python:line\n    string_args: [0, 1]\n"
      "  - binary: /usr/bin/python3.11\n    symbol: main\n    stack: both\n"
      "syscalls:\n  - {name: openat, stack: kernel}\n",
      "a.yaml");
  ASSERT_EQ(cfg.probes.size(), 3u);
  EXPECT_EQ(cfg.probes[0].stack, 0);
  EXPECT_EQ(cfg.probes[1].stack, 3);
  EXPECT_EQ(cfg.probes[2].stack, 2);
  EXPECT_EQ(cfg.probes[0].kind, ProbeKind::kUsdt);
  EXPECT_EQ(cfg.probes[0].symbol, "python:line");
  EXPECT_EQ(cfg.probes[0].string_args, 0b11);
  EXPECT_EQ(cfg.probes[0].key(), "usdt:/usr/bin/python3.11:python:line");
  EXPECT_EQ(cfg.probes[1].kind, ProbeKind::kUprobe);
  EXPECT_NE(cfg.probes[0].key(), cfg.probes[1].key());
  // Which strings are read is part of the attachment: a reload re-attaches when they change.
  ProbeSpec other = cfg.probes[0];
  other.string_args = 0b1;
  EXPECT_FALSE(other.same_attachment(cfg.probes[0]));
}

// Issue 36: a uprobe declares how many arguments its function takes (the table shows that many,
// every format carries that many); changing it re-attaches.
TEST(ConfigLoader, AUprobeDeclaresItsArgumentCount) {
  const Config cfg = parse_config(
      "probes:\n  - {binary: /bin/x, symbol: f, args: 2}\n  - {binary: /bin/x, symbol: g}\n", "a.yaml");
  ASSERT_EQ(cfg.probes.size(), 2u);
  EXPECT_EQ(cfg.probes[0].args, 2);
  EXPECT_FALSE(cfg.probes[1].args.has_value());
  ProbeSpec other = cfg.probes[0];
  other.args = 3;
  EXPECT_FALSE(other.same_attachment(cfg.probes[0]));
}

// broker.batch_gap reaches the forwarder; absent, the forwarder keeps its default.
TEST(ConfigLoader, BrokerBatchGapReachesTheForwarderOptions) {
  const Config set = parse_config("broker:\n  addresses: [a:1]\n  batch_gap: 5ms\n", "a.yaml");
  ASSERT_TRUE(set.broker.batch_gap.has_value());
  EXPECT_EQ(runtime::forwarder_of(set.broker).batch_gap, std::chrono::milliseconds(5));
  const Config unset = parse_config("broker:\n  addresses: [a:1]\n", "a.yaml");
  EXPECT_EQ(runtime::forwarder_of(unset.broker).batch_gap, ForwarderOptions{}.batch_gap);
}

// Issue 33: by default one probe discovers every CUDA library processes load ("*"); listed
// libraries are one probe each.
TEST(ConfigLoader, CudaEnabledDiscoversByDefaultAndListedLibrariesAreOneProbeEach) {
  const Config cfg = parse_config("cuda:\n  enabled: true\n  sampling: {rate: 0.5}\n", "a.yaml");
  ASSERT_EQ(cfg.probes.size(), 1u);
  EXPECT_EQ(cfg.probes[0].key(), "cuda:*");
  EXPECT_EQ(cfg.probes[0].sampling.rate, 0.5);
  const Config listed = parse_config("cuda:\n  enabled: true\n  libs: [libcudart.so, /opt/libcuda.so.1]\n", "a.yaml");
  ASSERT_EQ(listed.probes.size(), 2u);
  EXPECT_EQ(listed.probes[0].key(), "cuda:libcudart.so");
  EXPECT_EQ(listed.probes[1].key(), "cuda:/opt/libcuda.so.1");
}

// Issue 18: launches are one trap at entry unless their latency is asked for; slow-launch
// detection measures it, so it implies the timed probes.
TEST(ConfigLoader, CudaLatencyTimesLaunchesAndSlowLaunchImpliesIt) {
  const Config off = parse_config("cuda:\n  enabled: true\n", "a.yaml");
  EXPECT_FALSE(off.cuda.latency);
  ASSERT_EQ(off.probes.size(), 1u);  // cuda:*
  EXPECT_FALSE(off.probes[0].latency);
  const Config on = parse_config("cuda:\n  enabled: true\n  latency: true\n", "a.yaml");
  EXPECT_TRUE(on.cuda.latency);
  ASSERT_EQ(on.probes.size(), 1u);
  EXPECT_TRUE(on.probes[0].latency);
  const Config slow = parse_config("cuda:\n  enabled: true\n  slow_launch: 5ms\n", "a.yaml");
  EXPECT_FALSE(slow.cuda.latency);
  ASSERT_EQ(slow.probes.size(), 1u);
  EXPECT_TRUE(slow.probes[0].latency);
  EXPECT_THROW(parse_config("cuda:\n  enabled: true\n  latency: sometimes\n", "a.yaml"), ConfigError);
}

TEST(ConfigLoader, WeightedTargetUsesTheServiceTargetWhenGiven) {
  const Config cfg = parse_config(R"(
services:
  - service: api
    strategy: weighted
    target_qps: 1000
    weights: {stable: 90, canary: 10}
)", "a.yaml");
  EXPECT_EQ(cfg.version_targets("api"), (std::vector<VersionTarget>{{"stable", 900.0}, {"canary", 100.0}}));
  EXPECT_TRUE(cfg.version_targets("other").empty());
}

using mcp::test::TempDir;

TEST(ConfigLoader, RulesFileResolvesRelativeToTheConfigFile) {
  TempDir dir;
  dir.write("rules.mcp", "rule \"r\" when pid == 1 then drop = true end\n");
  const auto cfg_path = dir.write("agent.yaml", "compliance:\n  file: rules.mcp\n");
  const Config cfg = load_config(cfg_path);
  EXPECT_EQ(cfg.compliance.file, (dir.path() / "rules.mcp").string());
  EXPECT_EQ(cfg.compliance.rules->size(), 1u);
}

TEST(ConfigLoader, RulesFileErrorsNameTheRulesFile) {
  TempDir dir;
  dir.write("rules.mcp", "rule \"r\"\nwhen pid ==\nthen drop = true end\n");
  const auto cfg_path = dir.write("agent.yaml", "compliance:\n  file: rules.mcp\n");
  try {
    load_config(cfg_path);
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].file, (dir.path() / "rules.mcp").string());
    EXPECT_EQ(e.diagnostics()[0].line, 3);
    EXPECT_EQ(e.diagnostics()[0].column, 1);
  }
}

TEST(ConfigLoader, AuditLogDirIsTheConfigDirectorysAndItsLimitsAreChecked) {
  TempDir dir;
  const auto cfg_path = dir.write("agent.yaml", "compliance:\n  rules: 'rule \"r\" when pid == 1 then audit.trace = [\"A\"] end'\n"
                                                "  audit_log:\n    dir: trail\n    max_bytes: 1048576\n    max_age: 7d\n"
                                                "    key: keys/trail.key\n    max_files: 30\n    seal_every: 1000\n");
  const Config cfg = load_config(cfg_path);
  ASSERT_TRUE(cfg.compliance.audit_log.has_value());
  EXPECT_EQ(cfg.compliance.audit_log->dir, (dir.path() / "trail").string());
  EXPECT_EQ(cfg.compliance.audit_log->max_bytes, 1048576u);
  EXPECT_EQ(cfg.compliance.audit_log->max_age, std::chrono::hours(24 * 7));
  EXPECT_EQ(cfg.compliance.audit_log->key, (dir.path() / "keys/trail.key").string());
  EXPECT_EQ(cfg.compliance.audit_log->max_files, 30u);
  EXPECT_EQ(cfg.compliance.audit_log->seal_every, 1000u);
  for (const char* bad : {"compliance:\n  audit_log:\n    max_bytes: 4096\n",
                          "compliance:\n  audit_log:\n    dir: t\n    max_bytes: 10\n",
                          "compliance:\n  audit_log:\n    dir: t\n    max_age: soon\n",
                          "compliance:\n  audit_log:\n    dir: t\n    rotate: daily\n",
                          "compliance:\n  audit_log:\n    dir: t\n    max_files: -1\n",
                          "compliance:\n  audit_log:\n    dir: t\n    seal_every: 0\n"})
    EXPECT_THROW(parse_config(bad, "a.yaml"), ConfigError) << bad;
}

// `ready_file` means what --ready-file means; a relative path is the config directory's.
TEST(ConfigReadyFile, RelativePathResolvesAgainstTheConfigDirectory) {
  TempDir dir;
  EXPECT_EQ(load_config(dir.write("agent.yaml", "ready_file: run/ready\n")).ready_file,
            (dir.path() / "run/ready").string());
  EXPECT_EQ(load_config(dir.write("b.yaml", "ready_file: /tmp/x-ready\n")).ready_file, "/tmp/x-ready");
  EXPECT_EQ(load_config(dir.write("c.yaml", "node_name: x\n")).ready_file, "");
}

// The agent runs as root and applies its configuration live: a file or directory another
// user can write is refused as a whole, with one line naming it and the fix.
TEST(ConfigTrust, WorldWritableFileIsRefusedWithExitCodeTwo) {
  TempDir dir;
  const auto path = dir.write("agent.yaml", "node_name: x\n");
  fs::permissions(path, fs::perms::others_write, fs::perm_options::add);
  try {
    load_config(path);
    FAIL() << "a world-writable configuration was loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()), path.string() + ": refusing to load a configuration others can change: file " +
                                         path.string() + " is writable by group or others (mode 0646; chmod go-w)");
  }
}

TEST(ConfigTrust, GroupWritableDirectoryIsRefused) {
  TempDir dir;
  const auto path = dir.write("agent.yaml", "node_name: x\n");
  fs::permissions(dir.path(), fs::perms::group_write, fs::perm_options::add);
  try {
    load_config(path);
    FAIL() << "a configuration in a group-writable directory was loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("directory " + dir.path().string() + " is writable by group or others"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigTrust, WritableTargetDirectoryBehindASymlinkIsRefused) {
  // agent.yaml -> ..data/agent.yaml as in a ConfigMap: the directory of the real file counts too.
  TempDir dir;
  fs::create_directory(dir.path() / "real");
  std::ofstream(dir.path() / "real" / "agent.yaml") << "node_name: x\n";
  fs::permissions(dir.path() / "real", fs::perms::others_write, fs::perm_options::add);
  fs::create_symlink("real/agent.yaml", dir.path() / "agent.yaml");
  EXPECT_THROW(load_config(dir.path() / "agent.yaml"), ConfigError);
}

TEST(ConfigTrust, StickyWorldWritableDirectoryLikeTmpIsAllowed) {
  // In a sticky directory nobody else can replace or remove the file.
  TempDir dir;
  const auto path = dir.write("agent.yaml", "node_name: x\n");
  fs::permissions(dir.path(), fs::perms::all | fs::perms::sticky_bit);
  EXPECT_EQ(load_config(path).node_name, "x");
}

TEST(ConfigTrust, FileOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir dir;
  const auto path = dir.write("agent.yaml", "node_name: x\n");
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  try {
    load_config(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is owned by uid 65534"), std::string::npos) << e.what();
  }
}

TEST(ConfigTrust, OwnerOnlyFileLoads) {
  TempDir dir;
  const auto path = dir.write("agent.yaml", "node_name: x\n");
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(load_config(path).node_name, "x");
}

TEST(ConfigLoader, MissingFileIsAnErrorNamingIt) {
  try {
    load_config("/nonexistent/agent.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/agent.yaml: cannot read: No such file or directory");
    EXPECT_EQ(e.code(), ExitCode::kUsage);
  }
}

TEST(ConfigLoader, ReportsEveryProblemInFileOrder) {
  try {
    parse_config("exporter:\n  sample_rate: 2\nprobs: []\nmetrics:\n  listen: nope\n", "a.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 3u);
    EXPECT_EQ(e.diagnostics()[0].str(), "a.yaml:2:16: exporter.sample_rate must be in [1e-6, 1]");
    EXPECT_EQ(e.diagnostics()[1].str(), "a.yaml:3:1: unknown key 'probs' in agent.yaml (did you mean 'probes'?)");
    EXPECT_EQ(e.diagnostics()[2].str(), "a.yaml:5:11: metrics.listen 'nope' is not host:port");
    EXPECT_EQ(std::string(e.what()), e.diagnostics()[0].str());
  }
}

// exporter.otlp fills the exporter's own options (otlp/exporter_options.h): relative files are
// the config directory's, headers come from the file then the mapping, keys lower-cased.
TEST(ConfigLoader, ExporterOtlpKeysFillTheExporterOptions) {
  const fs::path dir = fs::temp_directory_path() / ("mcp-otlp-config-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "otlp-headers") << "# token\nAuthorization=Bearer t0k\r\n\n";
  const Config cfg = parse_config(
      "exporter:\n"
      "  error_only: true\n"
      "  otlp:\n"
      "    endpoint: otel-collector.monitoring.svc:4317\n"
      "    ca: otlp-ca.pem\n"
      "    header_file: otlp-headers\n"
      "    headers: {X-Tenant: lab}\n"
      "    queue: 1000\n"
      "    batch: 100\n"
      "    interval: 250ms\n"
      "    timeout: 2s\n"
      "    metrics_interval: 0s\n",
      "agent.yaml", dir);
  fs::remove_all(dir);
  EXPECT_TRUE(cfg.exporter.error_only);
  ASSERT_TRUE(cfg.otlp.has_value());
  EXPECT_EQ(cfg.otlp->endpoint, "otel-collector.monitoring.svc:4317");
  EXPECT_EQ(cfg.otlp->ca_file, (dir / "otlp-ca.pem").string());
  EXPECT_FALSE(cfg.otlp->insecure);
  EXPECT_EQ(cfg.otlp->headers, (std::vector<std::pair<std::string, std::string>>{{"authorization", "Bearer t0k"},
                                                                                 {"x-tenant", "lab"}}));
  EXPECT_EQ(cfg.otlp->queue_events, 1000u);
  EXPECT_EQ(cfg.otlp->batch_events, 100u);
  EXPECT_EQ(cfg.otlp->batch_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(cfg.otlp->timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(cfg.otlp->metrics_interval, std::chrono::milliseconds(0));
  EXPECT_FALSE(parse_config("exporter: {error_only: true}\n", "agent.yaml").otlp.has_value());
}

}  // namespace
}  // namespace mcp::config
