// Every validation path of agent.yaml: the first diagnostic names the right line:column.
#include <gtest/gtest.h>

#include "config/parse_config.h"
#include "mcp_abi.h"

namespace mcp::config {
namespace {

struct Bad {
  const char* name;
  const char* yaml;
  int line;
  int column;
  const char* fragment;
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

class ConfigValidation : public ::testing::TestWithParam<Bad> {};

TEST_P(ConfigValidation, FirstErrorHasPositionAndReason) {
  const Bad& b = GetParam();
  try {
    parse_config(b.yaml, "agent.yaml");
    FAIL() << "accepted:\n" << b.yaml;
  } catch (const ConfigError& e) {
    ASSERT_FALSE(e.diagnostics().empty());
    const Diagnostic& d = e.diagnostics().front();
    EXPECT_EQ(d.file, "agent.yaml");
    EXPECT_EQ(d.line, b.line) << d.str();
    EXPECT_EQ(d.column, b.column) << d.str();
    EXPECT_NE(d.message.find(b.fragment), std::string::npos) << d.str();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, ConfigValidation,
    ::testing::Values(
        // document level
        Bad{"Empty", "", 1, 1, "empty configuration"},
        Bad{"CommentsOnly", "# nothing\n", 1, 1, "empty configuration"},
        Bad{"YamlSyntax", "probes: [\n  {binary: /x\n", 3, 1, "YAML syntax"},
        Bad{"BadIndent", "node_name: a\n  broker: b\n", 2, 9, "YAML syntax"},
        Bad{"TwoDocuments", "node_name: a\n---\nnode_name: b\n", 2, 1, "more than one YAML document"},
        // yaml-cpp's LoadAll loops forever on these (found by fuzz_config)
        Bad{"StrayComma", ",", 1, 1, "YAML syntax"},
        Bad{"StrayCommaAfterDocument", "[a]\n,", 2, 1, "YAML syntax"},
        Bad{"TopIsList", "- a\n- b\n", 1, 1, "agent.yaml must be a mapping"},
        Bad{"UnknownTopKeyTypo", "node_name: a\nbrokr: {}\n", 2, 1, "did you mean 'broker'"},
        Bad{"UnknownTopKeyFar", "zzzzzzzz: 1\n", 1, 1, "expected one of"},
        Bad{"DuplicateKey", "node_name: a\nnode_name: b\n", 2, 1, "duplicate key 'node_name' (first at line 1)"},
        Bad{"Version", "version: 2\n", 1, 10, "unsupported version 2"},
        Bad{"VersionNotInt", "version: one\n", 1, 10, "must be an integer"},
        Bad{"NodeNameList", "node_name: [a]\n", 1, 12, "node_name must be a string"},
        // Issue 29: the broker refuses such an agent id, so every event would be lost.
        Bad{"NodeNameNotAnAgentId", "node_name: \"node 7|eu\"\n", 1, 12, "cannot be an agent id"},
        // broker
        Bad{"BrokerNoAddresses", "broker:\n  token_file: /t\n", 2, 3, "needs 'addresses'"},
        Bad{"BrokerCompression", "broker:\n  addresses: [a:1]\n  compression: zstd\n", 3, 16, "must be none or gzip"},
        Bad{"BrokerBatchGap", "broker:\n  addresses: [a:1]\n  batch_gap: 2s\n", 3, 14, "broker.batch_gap: duration '2s' is above the limit of 1s"},
        Bad{"BrokerEmptyAddresses", "broker:\n  addresses: []\n", 2, 14, "must not be empty"},
        Bad{"BrokerBadAddress", "broker:\n  addresses: [\"a:1\", broker]\n", 2, 22, "'broker' is not host:port"},
        Bad{"BrokerPortRange", "broker:\n  addresses: [a:70000]\n", 2, 15, "not host:port"},
        Bad{"BrokerAddressMap", "broker:\n  addresses: {a: 1}\n", 2, 14, "must be a list"},
        Bad{"BrokerUnknownKey", "broker:\n  addresses: [a:1]\n  token: x\n", 3, 3, "unknown key 'token' in broker"},
        Bad{"TlsHalfPair", "broker:\n  addresses: [a:1]\n  tls:\n    cert: /c\n", 4, 5, "both 'cert' and 'key'"},
        Bad{"TlsUnknown", "broker:\n  addresses: [a:1]\n  tls: {ca: /a, crt: /c}\n", 3, 17, "did you mean 'cert'"},
        // probes
        Bad{"ProbesNotList", "probes: {binary: /x}\n", 1, 9, "probes must be a list"},
        Bad{"ProbeNeitherTarget", "probes:\n  - symbol: f\n", 2, 5, "exactly one of 'binary' or 'library'"},
        Bad{"ProbeBothTargets", "probes:\n  - binary: /x\n    library: libx.so\n    symbol: f\n", 3, 5,
            "exactly one of"},
        Bad{"ProbeRelativeBinary", "probes:\n  - binary: app\n    symbol: f\n", 2, 13, "absolute path"},
        Bad{"ProbeNoSymbol", "probes:\n  - binary: /x\n", 2, 5, "exactly one of 'symbol' or 'usdt'"},
        Bad{"ProbeEmptySymbol", "probes:\n  - binary: /x\n    symbol: \"\"\n", 3, 13, "symbol must not be empty"},
        Bad{"ProbeTypo", "probes:\n  - symbl: f\n    binary: /x\n", 2, 5, "did you mean 'symbol'"},
        Bad{"TraceIdIndex", "probes:\n  - binary: /x\n    symbol: f\n    trace_id: 6\n", 4, 15, "0..5"},
        // Old configs meant a bare index as the integer id; the CLI meant a pointer to hex.
        Bad{"TraceIdBareIndex", "probes:\n  - binary: /x\n    symbol: f\n    trace_id: 1\n", 4, 15, "1:u64"},
        Bad{"TraceIdFormat", "probes:\n  - binary: /x\n    symbol: f\n    trace_id: \"1:hex\"\n", 4, 15,
            "hex32, bytes16 or u64"},
        Bad{"LatencyNotBool", "probes:\n  - binary: /x\n    symbol: f\n    latency: yes\n", 4, 14,
            "must be true or false, found 'yes'"},
        Bad{"LatencyQuoted", "probes:\n  - binary: /x\n    symbol: f\n    latency: \"true\"\n", 4, 14,
            "must be true or false"},
        Bad{"SelectorEmpty", "probes:\n  - binary: /x\n    symbol: f\n    selector: {}\n", 4, 15,
            "needs 'container_id', 'cgroup_path', 'pod' or 'namespace'"},
        Bad{"SelectorCgroupRelative", "probes:\n  - binary: /x\n    symbol: f\n    selector: {cgroup_path: kube}\n",
            4, 29, "must start with '/'"},
        // container-aware probes
        Bad{"ContainerNull", "probes:\n  - binary: /x\n    symbol: f\n    container:\n", 5, 1,
            "container must be a mapping: {} for any container"},
        Bad{"ContainerScalar", "probes:\n  - binary: /x\n    symbol: f\n    container: shop\n", 4, 16,
            "container must be a mapping"},
        Bad{"ContainerTypo", "probes:\n  - binary: /x\n    symbol: f\n    container: {namespce: shop}\n", 4, 17,
            "did you mean 'namespace'"},
        Bad{"ContainerPodWithoutNamespace", "probes:\n  - binary: /x\n    symbol: f\n    container: {pod: web-1}\n",
            4, 22, "container.pod: pod 'web-1' must be NAMESPACE/NAME"},
        Bad{"ContainerPodUppercase", "probes:\n  - binary: /x\n    symbol: f\n    container: {pod: Shop/web}\n",
            4, 22, "'Shop' is not a valid namespace name"},
        Bad{"ContainerPodTwoSlashes", "probes:\n  - binary: /x\n    symbol: f\n    container: {pod: a/b/c}\n", 4, 22,
            "'b/c' is not a valid pod name"},
        Bad{"ContainerNamespaceDot", "probes:\n  - binary: /x\n    symbol: f\n    container: {namespace: a.b}\n", 4,
            28, "container.namespace: namespace 'a.b' is not a valid namespace name"},
        Bad{"ContainerPodAndNamespace",
            "probes:\n  - binary: /x\n    symbol: f\n    container: {pod: a/b, namespace: a}\n", 4, 27,
            "either 'pod' (NAMESPACE/NAME) or 'namespace', not both"},
        Bad{"ContainerLibrary", "probes:\n  - library: libssl\n    symbol: f\n    container: {}\n", 4, 5,
            "container probes need 'binary'"},
        Bad{"ContainerAndSelector",
            "probes:\n  - binary: /x\n    symbol: f\n    selector: {cgroup_path: /a}\n    container: {}\n", 5, 5,
            "container and selector cannot be combined"},
        Bad{"ContainerDuplicateProbe",
            "probes:\n  - {binary: /x, symbol: f, container: {namespace: a}}\n"
            "  - {binary: /x, symbol: f, container: {namespace: a}}\n",
            3, 5, "duplicate probe 'uprobe:/x:f@in-namespace=a' (first at line 2)"},
        Bad{"TagsList", "probes:\n  - binary: /x\n    symbol: f\n    tags: [a]\n", 4, 11, "tags must be a mapping"},
        Bad{"TagsDuplicate", "probes:\n  - binary: /x\n    symbol: f\n    tags: {a: 1, a: 2}\n", 4, 18,
            "duplicate tag 'a'"},
        Bad{"DuplicateProbe", "probes:\n  - {binary: /x, symbol: f}\n  - {binary: /x, symbol: f}\n", 3, 5,
            "duplicate probe 'uprobe:/x:f' (first at line 2)"},
        // sampling
        Bad{"SamplingBoth", "syscalls:\n  - name: read\n    sampling: {rate: 0.5, target_qps: 3}\n", 3, 27,
            "either 'rate' or 'target_qps'"},
        Bad{"SamplingNeither", "syscalls:\n  - name: read\n    sampling: {consistent: true}\n", 3, 15,
            "needs 'rate' or 'target_qps'"},
        Bad{"RateZero", "syscalls:\n  - name: read\n    sampling: {rate: 0}\n", 3, 22, "[1e-6, 1]"},
        Bad{"RateAboveOne", "syscalls:\n  - name: read\n    sampling: {rate: 1.01}\n", 3, 22, "[1e-6, 1]"},
        Bad{"RateText", "syscalls:\n  - name: read\n    sampling: {rate: half}\n", 3, 22,
            "must be a number, found 'half'"},
        Bad{"RateQuoted", "syscalls:\n  - name: read\n    sampling: {rate: \"0.5\"}\n", 3, 22, "must be a number"},
        Bad{"TargetQpsNegative", "syscalls:\n  - name: read\n    sampling: {target_qps: -1}\n", 3, 28,
            "[0.01, 1e7]"},
        Bad{"TargetQpsHuge", "syscalls:\n  - name: read\n    sampling: {target_qps: 1e9}\n", 3, 28, "[0.01, 1e7]"},
        Bad{"RateTiny", "syscalls:\n  - name: read\n    sampling: {rate: 5e-324}\n", 3, 22, "[1e-6, 1]"},
        Bad{"ConsistentNotBool", "syscalls:\n  - name: read\n    sampling: {rate: 1, consistent: 2}\n", 3, 37,
            "true or false"},
        Bad{"SamplingTypo", "syscalls:\n  - name: read\n    sampling: {rate: 1, consisten: true}\n", 3, 25,
            "did you mean 'consistent'"},
        // syscalls
        Bad{"SyscallsNotList", "syscalls: openat\n", 1, 11, "syscalls must be a list"},
        Bad{"SyscallBadName", "syscalls: [openat, Open-At]\n", 1, 20, "is not a syscall name"},
        Bad{"SyscallNoName", "syscalls:\n  - sampling: {rate: 1}\n", 2, 5, "needs 'name'"},
        Bad{"DuplicateSyscall", "syscalls: [read, write, read]\n", 1, 25, "duplicate probe 'syscall:read'"},
        // cuda
        Bad{"CudaEnabledText", "cuda:\n  enabled: on\n", 2, 12, "true or false"},
        Bad{"CudaSlowLaunch", "cuda:\n  slow_launch: 5 parsecs\n", 2, 16, "cuda.slow_launch"},
        Bad{"CudaLibsEmpty", "cuda:\n  libs: []\n", 2, 9, "must not be empty"},
        Bad{"CudaLibsNotList", "cuda:\n  libs: libcuda.so\n", 2, 9, "must be a list"},
        // quotas
        Bad{"QuotaNoRate", "quotas:\n  default: {burst: 3}\n", 2, 12, "needs 'rate'"},
        Bad{"QuotaZeroRate", "quotas:\n  default: {rate: 0}\n", 2, 19, "greater than 0"},
        Bad{"QuotaSmallBurst", "quotas:\n  default: {rate: 5, burst: 0.5}\n", 2, 29, "at least 1"},
        Bad{"QuotaDefaultCgroup", "quotas:\n  default: {rate: 5, cgroup_path: /a}\n", 2, 22, "unknown key 'cgroup_path'"},
        Bad{"TenantNoCgroup", "quotas:\n  tenants:\n    - {rate: 5}\n", 3, 7, "needs 'cgroup_path'"},
        Bad{"TenantsNotList", "quotas:\n  tenants: {a: 1}\n", 2, 12, "must be a list"},
        Bad{"TenantDuplicate", "quotas:\n  tenants:\n    - {cgroup_path: /a, rate: 1}\n    - {cgroup_path: /a, rate: 2}\n",
            4, 7, "duplicate quota for '/a' (first at line 3)"},
        // exporter
        Bad{"ExporterErrorOnly", "exporter:\n  error_only: 1\n", 2, 15, "true or false"},
        Bad{"ExporterSampleRate", "exporter:\n  sample_rate: 0\n", 2, 16, "[1e-6, 1]"},
        Bad{"OtlpNoEndpoint", "exporter:\n  otlp: {insecure: true}\n", 2, 9, "needs 'endpoint'"},
        Bad{"OtlpEndpoint", "exporter:\n  otlp:\n    endpoint: collector\n", 3, 15, "is not host:port"},
        Bad{"OtlpTypo", "exporter:\n  otlp:\n    endpoint: c:4317\n    insecur: true\n", 4, 5,
            "did you mean 'insecure'"},
        Bad{"OtlpInsecureAndCa", "exporter:\n  otlp:\n    endpoint: c:4317\n    insecure: true\n    ca: /ca.pem\n", 4, 5,
            "'insecure' and 'ca' exclude each other"},
        Bad{"OtlpHeaderKey", "exporter:\n  otlp:\n    endpoint: c:4317\n    headers: {\"bad key\": v}\n", 4, 15,
            "OTLP header key 'bad key'"},
        Bad{"OtlpHeadersList", "exporter:\n  otlp:\n    endpoint: c:4317\n    headers: [a]\n", 4, 14, "must be a mapping"},
        Bad{"OtlpHeaderFile", "exporter:\n  otlp:\n    endpoint: c:4317\n    header_file: /nonexistent/h\n", 4, 18,
            "cannot read OTLP header file"},
        Bad{"OtlpQueue", "exporter:\n  otlp:\n    endpoint: c:4317\n    queue: 0\n", 4, 12, "must be positive"},
        Bad{"OtlpInterval", "exporter:\n  otlp:\n    endpoint: c:4317\n    interval: soon\n", 4, 15,
            "exporter.otlp.interval"},
        Bad{"OtlpTimeoutZero", "exporter:\n  otlp:\n    endpoint: c:4317\n    timeout: 0s\n", 4, 14, "must be positive"},
        // services / weighted strategy
        Bad{"WeightsSum90", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {v1: 80, v2: 10}\n",
            5, 14, "weights sum to 90, must sum to 100"},
        Bad{"WeightsSum110", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights:\n      v1: 80\n      v2: 30\n",
            6, 7, "weights sum to 110"},
        Bad{"WeightFraction", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {v1: 79.5, v2: 20.5}\n",
            5, 19, "weight must be an integer, found '79.5'"},
        Bad{"WeightQuoted", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {v1: \"80\", v2: 20}\n",
            5, 19, "weight must be an integer"},
        Bad{"WeightNegative", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {v1: 120, v2: -20}\n",
            5, 19, "between 0 and 100"},
        Bad{"WeightsEmpty", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {}\n",
            5, 14, "non-empty mapping"},
        Bad{"WeightsDuplicateVersion", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {v1: 50, v1: 50}\n",
            5, 23, "duplicate version 'v1'"},
        Bad{"WeightsMissing", "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n", 2, 5,
            "needs 'weights'"},
        Bad{"StrategyUnknown", "services:\n  - service: api\n    strategy: round_robin\n    weights: {v1: 100}\n", 3, 15,
            "unknown strategy 'round_robin'"},
        Bad{"StrategyMissing", "services:\n  - service: api\n    weights: {v1: 100}\n", 2, 5, "needs 'strategy'"},
        Bad{"ServiceMissing", "services:\n  - strategy: weighted\n    weights: {v1: 100}\n", 2, 5, "needs 'service'"},
        Bad{"ServiceNoTarget", "services:\n  - service: api\n    strategy: weighted\n    weights: {v1: 100}\n", 2, 5,
            "has weights but no target"},
        Bad{"ServiceDuplicate", "services:\n  - {service: a, strategy: weighted, weights: {v: 100}, target_qps: 1}\n"
                                "  - {service: a, strategy: weighted, weights: {v: 100}, target_qps: 1}\n",
            3, 5, "duplicate strategy for service 'a'"},
        Bad{"ServicesNotList", "services: {a: 1}\n", 1, 11, "services must be a list"},
        // compliance
        Bad{"ComplianceBoth", "compliance:\n  rules: \"\"\n  file: r.mcp\n", 3, 3, "either 'rules' (inline) or 'file'"},
        Bad{"ComplianceMissingFile", "compliance:\n  file: /nonexistent/r.mcp\n", 2, 9, "cannot read"},
        Bad{"ComplianceInlineBlock",
            "compliance:\n  rules: |\n    rule \"a\"\n    when pid == 1\n    then sample.exmpt = true\n    end\n", 5, 10,
            "unknown action 'sample.exmpt'"},
        Bad{"ComplianceInlineQuoted", "compliance:\n  rules: 'rule \"a\" when pid = 1 then drop = true end'\n",
            2, 29, "expected 'then'"},
        Bad{"ComplianceInlinePlain", "compliance: {rules: rule x}\n", 1, 26, "expected string"},
        // usdt probes
        Bad{"UsdtAndSymbol", "probes:\n  - {binary: /bin/x, symbol: f, usdt: 'p:n'}\n", 2, 33,
            "exactly one of 'symbol' or 'usdt'"},
        Bad{"UsdtNotProviderName", "probes:\n  - {binary: /bin/x, usdt: line}\n", 2, 28, "PROVIDER:NAME"},
        Bad{"UsdtLatency", "probes:\n  - {binary: /bin/x, usdt: 'p:n', latency: true}\n", 2, 35, "no latency"},
        Bad{"StringArgsOnUprobe", "probes:\n  - {binary: /bin/x, symbol: f, string_args: [0]}\n", 2, 33,
            "string_args is for 'usdt' probes"},
        Bad{"StringArgsIndex", "probes:\n  - {binary: /bin/x, usdt: 'p:n', string_args: [6]}\n", 2, 49,
            "argument index must be 0..5"},
        Bad{"StringArgsTooMany", "probes:\n  - {binary: /bin/x, usdt: 'p:n', string_args: [0, 1, 2, 3]}\n", 2, 58,
            "at most 3 strings"},
        Bad{"ArgsOverSix", "probes:\n  - {binary: /bin/x, symbol: f, args: 7}\n", 2, 39, "args must be 0..6"},
        Bad{"ArgsOnUsdt", "probes:\n  - {binary: /bin/x, usdt: 'p:n', args: 2}\n", 2, 35,
            "a USDT probe's note declares its arguments"},
        Bad{"StackBad", "probes:\n  - {binary: /bin/x, symbol: f, stack: all}\n", 2, 40,
            "stack must be user, kernel or both"},
        // metrics
        Bad{"MetricsListen", "metrics:\n  listen: 9464\n", 2, 11, "is not host:port"},
        Bad{"MetricsTypo", "metrics:\n  listn: a:1\n", 2, 3, "did you mean 'listen'"}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

// Issue 29: check-config passed 2,000 uprobes that `run` refused 20 s later; the limit is half
// the kernel side's probe slots (a reload stages the new probes beside the old), counted over
// uprobes and syscalls together.
TEST(ConfigValidation, MoreProbesThanTheKernelHasSlotsForAreRefused) {
  auto config = [](int probes, int syscalls) {
    std::string text = "probes:\n";
    for (int i = 0; i < probes; i++) text += "  - {binary: /usr/bin/app, symbol: f" + std::to_string(i) + "}\n";
    static const char* const kNames[] = {"getppid", "getpid", "read", "write", "openat", "close"};
    text += "syscalls:\n";
    for (int i = 0; i < syscalls; i++) text += std::string("  - ") + kNames[i] + "\n";
    return text;
  };
  static_assert(2 * MCP_MAX_CONFIGURED_PROBES < MCP_MAX_PROBES - 1);
  EXPECT_NO_THROW(parse_config(config(MCP_MAX_CONFIGURED_PROBES - 5, 5), "agent.yaml"));
  try {
    parse_config(config(MCP_MAX_CONFIGURED_PROBES - 5, 6), "agent.yaml");
    ADD_FAILURE() << "one probe too many accepted";
  } catch (const ConfigError& e) {
    const std::string want = std::to_string(MCP_MAX_CONFIGURED_PROBES + 1) +
                             " probes and syscalls: at most " + std::to_string(MCP_MAX_CONFIGURED_PROBES);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_config(config(5000, 0), "agent.yaml"), ConfigError);
}

TEST(ConfigValidation, WeightsSummingTo100Pass) {
  const Config cfg = parse_config(
      "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {a: 33, b: 33, c: 34}\n",
      "agent.yaml");
  ASSERT_EQ(cfg.services.size(), 1u);
  EXPECT_EQ(cfg.services[0].weights.size(), 3u);
  EXPECT_EQ(cfg.services[0].weights[2], (std::pair<std::string, int>{"c", 34}));
}

TEST(ConfigValidation, ZeroWeightVersionIsAllowed) {
  const Config cfg = parse_config(
      "services:\n  - service: api\n    strategy: weighted\n    target_qps: 10\n    weights: {a: 100, b: 0}\n",
      "agent.yaml");
  EXPECT_EQ(cfg.version_targets("api"), (std::vector<VersionTarget>{{"a", 10.0}, {"b", 0.0}}));
}

}  // namespace
}  // namespace mcp::config
