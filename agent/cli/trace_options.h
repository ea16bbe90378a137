// TraceOptions: everything `mcp-agent trace` accepts, parsed by CLI11 and then
// validated as a whole (validate() throws mcp::Error usage with one line).
//
// With --config FILE the agent.yaml sections that describe the data path apply as they do
// in `run` (probes, syscalls, cuda, sampling, quotas, compliance, exporter, broker,
// ready_file, services), read by the same code (config/parse_config.h, runtime/config_spec.h,
// runtime/probe_set.h). Flags add to the file or override it:
//   --uprobe/--usdt/--syscall add probes, which take -r/--target-qps/--trace-id-arg/--latency/
//   --service/--tag as without a file (--latency: uprobes and syscalls; --string-arg: USDT
//   probes); the file's probes keep their own settings;
//   --tenant-quota adds a cgroup (or replaces the file's quota for the same cgroup);
//   --default-quota, --export-sample-rate, --slow-launch, --compression, --batch-gap, --ready-file
//   override the file's value; --error-only and --cuda-latency turn exporter.error_only
//   and cuda.latency on.
// Where two settings cannot both hold, validate() rejects the pair: --rules with a
// compliance section, --broker with broker.addresses, --tls-*/--token-file with the file's
// broker, --cuda/--cuda-lib with cuda.enabled, a --syscall the file declares too.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/setting_names.h"
#include "control/tenant_quota.h"
#include "control/trace_id_arg.h"
#include "otlp/exporter_options.h"
#include "runtime/export_filter.h"

namespace mcp::config {
struct Config;
}
namespace CLI {
class App;
}

namespace mcp::cli {

struct TraceOptions {
  std::vector<std::string> uprobes;   // BINARY:SYMBOL
  std::vector<std::string> syscalls;  // names without sys_enter_
  std::vector<std::string> usdts;     // BINARY:PROVIDER:NAME
  std::optional<int> args;            // --args: the --uprobe functions' argument count
  std::vector<int> string_arg_list;   // --string-arg: USDT arguments read as strings
  uint8_t string_args = 0;            // ... as a mask (validate())
  std::string list_usdt;              // --list-usdt BINARY: print its USDT probes and exit
  std::string stack_text;             // --stack user|kernel|both
  uint8_t stack = 0;                  // ... as ProbeSpec::stack (validate())
  bool latency = false;
  pid_t pid = 0;
  bool no_follow = false;             // trace only the target process, not its descendants
  double sample_rate = 1.0;
  std::string duration_text;          // e.g. "10s"; empty: until the command exits / Ctrl-C
  std::chrono::nanoseconds duration{0};
  uint64_t max_events = 0;            // 0: unlimited
  std::string format = "json";
  std::string ringbuf_size_text = "16M";
  uint64_t ringbuf_bytes = 16u << 20;
  uint64_t wakeup_bytes = 64u << 10;
  std::string output;                 // file for events; empty: stdout
  bool quiet_summary = false;
  bool verbose = false;
  std::vector<std::string> command;   // after `--`
  // Adaptive sampling (control loop) and tenant isolation.
  double target_qps = 0;              // > 0: steer each probe's kept rate to this
  std::vector<std::string> tenant_quota_texts;  // CGROUP_PATH=RATE[:BURST]
  std::string default_quota_text;     // RATE[:BURST] for every other tenant
  std::vector<control::TenantQuotaSpec> tenant_quotas;
  std::optional<control::Quota> default_quota;
  std::string trace_id_arg_text;      // N[:hex32|:bytes16]
  std::optional<control::TraceIdArg> trace_id_arg;
  // Trace-id prefix rules: HEX=RATE (repeatable), on every flag probe with --trace-id-arg.
  std::vector<std::string> trace_id_prefix_texts;
  std::vector<std::pair<std::string, double>> trace_id_prefixes;  // (lowercase digits, rate)
  // Forwarding to a broker, and what every event is labelled with
  std::string brokers;                // HOST:PORT[,HOST:PORT...]; empty: stdout only
  bool also_stdout = false;           // with --broker or --otlp-endpoint, print events as well
  std::string tls_ca, tls_cert, tls_key, token_file;
  std::string spool_dir;
  std::string compression = "none";  // none | gzip
  std::string batch_gap_text;        // empty: the file's or the forwarder's default
  std::optional<std::chrono::nanoseconds> batch_gap;
  std::string agent_id;
  std::string service;
  std::vector<std::string> tag_texts; // KEY=VALUE
  std::vector<std::pair<std::string, std::string>> tags;
  // OTLP export to a collector (the broker's --otlp-* flags); endpoint empty: off
  otlp::OtlpFlags otlp;
  // Exporter step, as the config's `compliance` and `exporter` sections
  std::string rules_file;             // compliance rules (the language of compliance.rules)
  std::string audit_log_dir;          // the rules' decisions recorded there (compliance.audit_log)
  bool error_only = false;
  double export_sample_rate = 1.0;
  runtime::ExportFilterSpec export_filter;  // derived by validate()
  std::string ready_file;             // written once every probe is attached
  // agent.yaml; see above for how the flags merge into it
  std::string config_file;
  std::shared_ptr<const config::Config> config;  // loaded by validate()
  std::set<std::string> given;        // long names of the options on the command line ("--sample-rate")
  // CUDA
  bool cuda = false;
  std::vector<std::string> cuda_libs;
  bool no_windows = false;            // sample calls, never time windows (loader/sampling_windows.h)
  bool cuda_latency = false;          // launches timed entry to return (validate(): also with slow_launch)
  std::string slow_launch_text = "0";
  std::string slow_hold_text = "10s";
  std::chrono::nanoseconds slow_launch{0};
  std::chrono::nanoseconds slow_hold{0};
};

// Registers the flags on `sub` (the trace subcommand).
void add_trace_options(CLI::App& sub, TraceOptions& options);
// Checks cross-field rules and fills derived fields; throws mcp::Error (usage).
void validate(TraceOptions& options);
// The flag a user writes for a setting that lower layers name (common/setting_names.h).
std::string trace_flag_for(Setting s);
// "64K", "16M", "1G", "4096" -> bytes; throws mcp::Error (usage).
uint64_t parse_size(const std::string& text);

}  // namespace mcp::cli
