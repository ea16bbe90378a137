// Config: the validated content of agent.yaml, an immutable value once built by
// parse_config()/load_config() (config/parse_config.h). Every probe the file declares
// (uprobes, syscalls, CUDA libraries) is normalised into one ProbeSpec list whose key()
// names its attachment, so a reload can diff old and new configurations probe by probe.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "control/trace_id_arg.h"
#include "k8s/pod_ref.h"
#include "otlp/exporter_options.h"
#include "rules/ruleset.h"

namespace mcp::config {

// 1-based line and column in the YAML file; 0:0 when not from a file.
struct Position {
  int line = 0;
  int column = 0;
  bool operator==(const Position&) const = default;
};

struct TlsConfig {
  std::string ca, cert, key;  // PEM file paths; empty ca means the system roots
  bool operator==(const TlsConfig&) const = default;
};

struct BrokerConfig {
  std::vector<std::string> addresses;  // host:port, tried in order
  std::string token_file;              // bearer token, re-read on connect; empty: none
  std::optional<TlsConfig> tls;        // absent: plaintext
  std::string compression = "none";    // none | gzip (batches to the broker)
  // Heavy traffic: least time between batches on an idle wire (ForwarderOptions::batch_gap);
  // absent: the forwarder's default, 0: latency first (a batch per acknowledgement).
  std::optional<std::chrono::nanoseconds> batch_gap;
  bool operator==(const BrokerConfig&) const = default;
};

// Exactly one of rate / target_qps is set when `enabled` (absent sampling block: rate 1).
struct Sampling {
  std::optional<double> rate;        // keep probability in (0, 1]
  std::optional<double> target_qps;  // steer the rate so about this many events/s are kept
  bool consistent = false;           // decide on the trace id so every hop keeps the same traces
  bool operator==(const Sampling&) const = default;
};

// Where a uprobe reads the trace id: the same type and spelling as `trace --trace-id-arg`.
using TraceIdArg = control::TraceIdArg;

struct Selector {
  std::string container_id;  // only processes in this container (prefix of the full id)
  std::string cgroup_path;   // only processes in this cgroup (v2 path under /sys/fs/cgroup)
  std::optional<k8s::PodRef> pods;  // only processes of these pods (`pod:` / `namespace:`, via the pod watch)
  bool empty() const { return container_id.empty() && cgroup_path.empty() && !pods; }
  bool operator==(const Selector&) const = default;
};

// `container:` on a probe: its `binary` is a path inside containers (processes in a
// kubelet-layout pod cgroup), resolved through each one's /proc/PID/root; the probe sees
// only the processes of the containers it names. Both empty (`container: {}`): every
// container on the node. Naming a pod or a namespace needs the pod watch (kubernetes:).
struct ContainerScope {
  std::string ns;   // `namespace: NS`, or the NS of `pod: NS/NAME`; empty: any namespace
  std::string pod;  // the NAME of `pod: NS/NAME`; empty: any pod (of ns)
  bool any() const { return ns.empty() && pod.empty(); }
  // "pod shop/web-1", "namespace shop", "any container"
  std::string describe() const {
    return !pod.empty() ? "pod " + ns + "/" + pod : !ns.empty() ? "namespace " + ns : "any container";
  }
  bool operator==(const ContainerScope&) const = default;
};

// kUsdt: a uprobe-like probe on a USDT site: target as a uprobe's, symbol "PROVIDER:NAME".
enum class ProbeKind : uint8_t { kUprobe, kSyscall, kCuda, kUsdt };

struct ProbeSpec {
  ProbeKind kind = ProbeKind::kUprobe;
  std::string target;          // uprobe: binary path or library name; syscall: name; cuda: library
  bool target_is_library = false;  // uprobe declared with `library:` (resolved per process)
  std::string symbol;          // uprobe: the function; usdt: "PROVIDER:NAME"
  uint8_t string_args = 0;     // usdt: bit N reads argument N as a string
  uint8_t stack = 0;           // uprobe, usdt, syscall: MCP_STACK_* (user 1, kernel 2) kept events carry
  // uprobe: the arguments the function takes (0..6), carried in every format. Unset: all six
  // registers, which the table leaves out (a syscall's count comes from the kernel, a USDT
  // probe's from its note).
  std::optional<uint8_t> args;
  // trace: matched by a --uprobe wildcard. One the kernel refuses (an instruction uprobes cannot
  // step over, as libc's lock-prefixed pthread_spin_lock) is skipped with a line saying why,
  // not an error that ends the trace. Not part of the attachment's identity.
  bool from_pattern = false;
  Selector selector;
  std::optional<ContainerScope> container;  // uprobe by binary only: a path inside these containers
  std::string service;
  std::vector<std::pair<std::string, std::string>> tags;  // in file order
  std::optional<TraceIdArg> trace_id;
  bool latency = false;        // also attach the uretprobe and report durations
  Sampling sampling;
  Position pos;                // of the entry in the file

  // Identity of the attachment: kind, target, symbol, selector and container scope. Two specs with equal keys
  // attach the same thing; see reload/diff.h for what else may change without a re-attach.
  std::string key() const;
  // Fields that need a re-attach when they change (everything but sampling and metadata).
  bool same_attachment(const ProbeSpec& o) const {
    return key() == o.key() && trace_id == o.trace_id && latency == o.latency && string_args == o.string_args &&
           stack == o.stack && args == o.args;
  }
  bool operator==(const ProbeSpec& o) const {
    return kind == o.kind && target == o.target && target_is_library == o.target_is_library &&
           symbol == o.symbol && selector == o.selector && container == o.container && service == o.service && tags == o.tags &&
           trace_id == o.trace_id && latency == o.latency && string_args == o.string_args && stack == o.stack &&
           args == o.args && sampling == o.sampling;
  }
};

// Adds argument `index` to a ProbeSpec::string_args mask (--string-arg, a probe's `string_args:`):
// "" when added, else why not ("argument index must be 0..5", "argument N is given twice", "at
// most 3 strings per probe").
std::string add_string_arg(uint8_t& mask, long long index);

// "user", "kernel" or "both" (--stack, a probe's `stack:`) as ProbeSpec::stack; nullopt else.
std::optional<uint8_t> parse_stack_kind(std::string_view text);

// The CUDA probe target that discovers libraries as processes load them (runtime/probe_set.h).
inline constexpr const char* kCudaDiscover = "*";

struct CudaConfig {
  bool enabled = false;
  std::vector<std::string> libs;             // default: {kCudaDiscover}
  bool latency = false;                      // launches timed entry to return (ret, duration); else one
                                             // trap at entry. Slow-launch detection implies it.
  std::chrono::nanoseconds slow_launch{0};   // launch API latency above which slow mode starts; 0 off
  Sampling sampling;
  bool operator==(const CudaConfig&) const = default;
};

struct TenantQuota {
  std::string cgroup_path;  // empty for the default quota; pods->text() for pods
  std::optional<k8s::PodRef> pods;  // `pod:` / `namespace:` (resolved through the pod watch)
  double rate = 0;          // events per second
  double burst = 0;         // bucket depth, events
  Position pos;
  bool operator==(const TenantQuota& o) const {
    return cgroup_path == o.cgroup_path && pods == o.pods && rate == o.rate && burst == o.burst;
  }
};

struct QuotaConfig {
  std::optional<TenantQuota> default_quota;  // tenants not listed; absent: unlimited
  std::vector<TenantQuota> tenants;
  bool operator==(const QuotaConfig&) const = default;
};

struct ExporterFilters {
  bool error_only = false;   // forward only events whose return value marks an error
  double sample_rate = 1.0;  // extra uniform sampling before export, (0, 1]
  bool operator==(const ExporterFilters&) const = default;
};

// `strategy: weighted` splits the service's target QPS between versions (the `version` tag).
struct ServiceStrategy {
  std::string service;
  std::string strategy;                               // "weighted"
  std::vector<std::pair<std::string, int>> weights;   // version -> percent, sums to 100
  std::optional<double> target_qps;                   // absent: sum of the service's probes' target_qps
  Position pos;
  bool operator==(const ServiceStrategy& o) const {
    return service == o.service && strategy == o.strategy && weights == o.weights && target_qps == o.target_qps;
  }
};

struct VersionTarget {
  std::string version;
  double target_qps = 0;
  bool operator==(const VersionTarget&) const = default;
};

// `compliance.audit_log:` where the rules' decisions are recorded (audit/audit_log.h).
struct AuditLogConfig {
  std::string dir;                                      // relative: the config directory's
  uint64_t max_bytes = 64ull << 20;                     // rotate past this size
  std::chrono::seconds max_age = std::chrono::hours(24);  // rotate after this long
  std::string key;                                      // the MAC key file; empty: `<dir>.key`
  uint32_t max_files = 0;                               // files kept (0: all)
  uint32_t seal_every = 100;                            // records between seals (each costs two fsyncs)
  bool operator==(const AuditLogConfig&) const = default;
};

struct ComplianceConfig {
  std::string source;                         // the rules text (inline or read from `file`)
  std::optional<AuditLogConfig> audit_log;    // takes effect on restart
  std::string file;                           // resolved path when given as a file, else empty
  std::shared_ptr<const rules::RuleSet> rules;  // compiled; never null (empty set when no rules)
  bool operator==(const ComplianceConfig& o) const { return source == o.source; }
};

// `kubernetes:` pod names from the API server's watch on this node's pods (k8s/pod_names.h).
// Empty api_server / token_file / ca_file: the in-cluster service account's.
struct KubernetesConfig {
  bool pod_names = true;                // watch pods for names; false: cgroup-derived ids only
  std::string api_server;               // https://host:port
  std::string token_file;
  std::string ca_file;
  std::vector<std::string> pod_labels;  // label keys copied onto each event (pod_labels)
  bool operator==(const KubernetesConfig&) const = default;
};

inline constexpr const char* kDefaultMetricsListen = "127.0.0.1:9464";

struct Config {
  std::string path;          // file it was read from (for messages)
  std::string node_name;     // agent id; empty: $NODE_NAME, then $STATE_DIRECTORY/agent-id, then a per-run id
  BrokerConfig broker;
  std::vector<ProbeSpec> probes;  // uprobes, then syscalls, then CUDA libraries (when enabled)
  CudaConfig cuda;
  QuotaConfig quotas;
  ExporterFilters exporter;
  std::optional<otlp::ExporterOptions> otlp;  // exporter.otlp: also export to this collector
  std::vector<ServiceStrategy> services;
  ComplianceConfig compliance;
  std::string metrics_listen = kDefaultMetricsListen;
  std::string ready_file;    // readiness line written here once probes are attached (as --ready-file)
  KubernetesConfig kubernetes;

  const ServiceStrategy* find_service(std::string_view name) const;
  // The service's target QPS (its own, else the sum of its probes') split by weight;
  // empty when the service has no strategy or no target.
  std::vector<VersionTarget> version_targets(std::string_view service) const;
};

}  // namespace mcp::config
