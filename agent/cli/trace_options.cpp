#include "cli/trace_options.h"

#include <algorithm>
#include <CLI/CLI.hpp>
#include <signal.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/agent_id_rule.h"
#include "common/duration.h"
#include "common/error.h"
#include "common/sampling_bounds.h"
#include "common/trace_id_prefix.h"
#include "loader/bpf_session.h"
#include "config/parse_config.h"
#include "runtime/config_spec.h"

namespace mcp::cli {

void add_trace_options(CLI::App& sub, TraceOptions& o) {
  sub.add_option("--uprobe,-u", o.uprobes, "Trace a user function: BINARY:SYMBOL (path, library name or program)");
  sub.add_option("--syscall,-s", o.syscalls, "Trace a syscall by name, e.g. getppid");
  sub.add_option("--usdt", o.usdts,
                 "Trace a USDT (static) probe: BINARY:PROVIDER:NAME, e.g. /usr/bin/python3:python:line");
  sub.add_option("--args", o.args,
                 "The --uprobe functions take N arguments (0-6): events carry N, the table shows them "
                 "(default: all six registers, which the table leaves out)");
  sub.add_option("--string-arg", o.string_arg_list,
                 "Read USDT argument N (0-5) as a string, shown as attribute argN (repeatable, at most 3)");
  sub.add_option("--stack", o.stack_text,
                 "Kept events of --uprobe/--usdt/--syscall probes carry their stack, named: user, kernel or both");
  sub.add_option("--list-usdt", o.list_usdt, "List the USDT probes of BINARY (path, library or program) and exit");
  sub.add_flag("--latency,-l", o.latency, "Also attach the uretprobe: one event per call with ret and duration");
  sub.add_option("--pid,-p", o.pid, "Trace only this process and its descendants; exit when they are gone");
  sub.add_flag("--no-follow", o.no_follow, "With --pid or a command: not its children (default: follow forks like strace -f)");
  sub.add_option("--sample-rate,-r", o.sample_rate, "Probability of keeping an event, 1e-6 <= R <= 1 (default 1)");
  sub.add_option("--duration,-d", o.duration_text, "Stop after this long, e.g. 10s, 500ms");
  sub.add_option("--max-events,-n", o.max_events, "Stop after printing this many events");
  sub.add_option("--format,-f", o.format, "Output: json (one object per line) or table");
  sub.add_option("--ringbuf-size", o.ringbuf_size_text, "Ring buffer size (power of two), e.g. 16M");
  sub.add_option("--wakeup-bytes", o.wakeup_bytes, "Wake the consumer once this many bytes are pending");
  sub.add_option("--output,-o", o.output, "Write events to this file instead of stdout");
  sub.add_flag("--no-summary", o.quiet_summary, "Do not print the per-probe summary on exit");
  sub.add_flag("--verbose,-v", o.verbose, "Log libbpf and agent debug messages");
  sub.add_option("--target-qps", o.target_qps, "Steer each probe's kept events/s to N (adaptive sampling)");
  sub.add_option("--tenant-quota", o.tenant_quota_texts,
                 "Hard quota for a cgroup: CGROUP_PATH=RATE[:BURST] events/s (repeatable)");
  sub.add_option("--default-quota", o.default_quota_text, "Quota for every other cgroup: RATE[:BURST]");
  sub.add_option("--trace-id-arg", o.trace_id_arg_text,
                 "Consistent sampling on a trace id in argument N: N:hex32, N:bytes16 (pointers) or N:u64");
  sub.add_option("--trace-id-prefix", o.trace_id_prefix_texts,
                 "With --trace-id-arg: keep the trace ids starting with HEX (1-32 digits) at RATE instead "
                 "of the probe's rate, on every probe with a trace-id argument: HEX=RATE (repeatable; the "
                 "longest matching prefix decides)");
  sub.add_option("--broker", o.brokers, "Forward events to mcp-broker HOST:PORT[,HOST:PORT...] (fail over in order)");
  sub.add_flag("--also-stdout", o.also_stdout, "With --broker or --otlp-endpoint, print events as well");
  sub.add_option("--tls-ca", o.tls_ca, "CA of the broker's certificate (enables TLS)");
  sub.add_option("--tls-cert", o.tls_cert, "Client certificate for mTLS");
  sub.add_option("--tls-key", o.tls_key, "Client key for mTLS");
  sub.add_option("--token-file", o.token_file, "Bearer token for the broker (first line of the file)");
  sub.add_option("--spool-dir", o.spool_dir, "Keep unacknowledged batches here (default: in memory)");
  sub.add_option("--compression", o.compression, "Compression of batches to the broker: none or gzip")
      ->check(CLI::IsMember({"none", "gzip"}))
      ->capture_default_str();
  sub.add_option("--batch-gap", o.batch_gap_text,
                 "Under heavy traffic, least time between batches to the broker (e.g. 2ms; 0: a batch "
                 "per acknowledgement, least latency, most CPU; at most 1s; default 2ms)");
  sub.add_option("--agent-id", o.agent_id, "Agent id the broker deduplicates by (default: hostname)");
  sub.add_option("--service", o.service, "Service name every event is labelled with");
  sub.add_option("--tag", o.tag_texts, "Tag every event: KEY=VALUE (repeatable)");
  otlp::add_otlp_flags(sub, o.otlp);
  sub.add_option("--rules", o.rules_file, "Compliance rules file (drop, redact, exempt, rate), as compliance.file");
  sub.add_option("--audit-log", o.audit_log_dir,
                 "Record each exempt/redact/audit decision of the rules in a hash-chained trail in this directory "
                 "(as compliance.audit_log; check it with `mcp-agent audit verify DIR`)");
  sub.add_flag("--error-only", o.error_only, "Export only events whose return value marks an error");
  sub.add_option("--export-sample-rate", o.export_sample_rate, "Extra uniform sampling before export, [1e-6, 1]");
  sub.add_option("--config,-c", o.config_file,
                 "agent.yaml: its probes, sampling, quotas, compliance, exporter and broker, as `run` reads them");
  sub.add_option("--ready-file", o.ready_file, "Write the readiness line to this file once every probe is attached");
  sub.add_flag("--cuda", o.cuda, "Trace CUDA kernel launches and API calls of the target");
  sub.add_option("--cuda-lib", o.cuda_libs, "CUDA runtime/driver library (or static binary) to probe (repeatable)");
  sub.add_flag("--no-windows", o.no_windows,
               "Below rate 0.5, uprobes are attached only in short time windows (cost "
               "scales with the rate); this samples every call instead (every call traps, tighter estimates "
               "for short bursts)");
  sub.add_flag("--cuda-latency", o.cuda_latency,
               "Time each launch entry to return (ret and duration_ns): a second trap per launch");
  sub.add_option("--slow-launch", o.slow_launch_text,
                 "Launches slower than this switch their process to rate 1 with stacks (0, the default: off; "
                 "implies --cuda-latency)");
  sub.add_option("--slow-hold", o.slow_hold_text, "How long a process stays in slow-launch mode");
  sub.add_option("command", o.command, "-- COMMAND ARGS...: run it and trace it and its descendants until they exit");
  // Everything after the first positional (or `--`) belongs to the command, dashes included.
  sub.positionals_at_end();
  // Which options were given: a flag overrides the file's value only when it was.
  sub.parse_complete_callback([&sub, &o] {
    o.given.clear();
    for (const CLI::Option* opt : sub.get_options())
      if (opt->count() > 0 && !opt->get_lnames().empty()) o.given.insert("--" + opt->get_lnames().front());
  });
}

uint64_t parse_size(const std::string& text) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) throw usage_error("bad size '" + text + "' (expected e.g. 64K, 16M)");
  std::string_view unit(ptr, text.data() + text.size() - ptr);
  int shift = 0;
  if (unit == "K" || unit == "k" || unit == "KiB") shift = 10;
  else if (unit == "M" || unit == "MiB") shift = 20;
  else if (unit == "G" || unit == "GiB") shift = 30;
  else if (!unit.empty()) throw usage_error("bad size unit in '" + text + "' (use K, M or G)");
  if (value > (UINT64_MAX >> shift)) throw usage_error("size '" + text + "' is too large");
  return value << shift;
}

namespace {

// CLI11 reads an unsigned option with strtoull, which takes "-1" for 2^64-1: a negative count
// arrives as a huge one. The number as the user wrote it, for the message.
std::string as_given(uint64_t v) {
  return v > uint64_t{INT64_MAX} ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
}

// A cgroup path as both spellings give it (relative to the cgroup2 mount, with or without '/').
std::string cgroup_key(std::string path) {
  while (!path.empty() && path.front() == '/') path.erase(0, 1);
  while (!path.empty() && path.back() == '/') path.pop_back();
  return path;
}

// --config: the file's sections, merged with the flags (rules in trace_options.h).
void merge_config(TraceOptions& o) {
  const config::Config& c = *o.config;
  const std::string& file = o.config_file;
  auto given = [&o](const char* flag) { return o.given.count(flag) > 0; };
  // Exclusive pairs: two settings that cannot both hold.
  if (!o.rules_file.empty() && !c.compliance.source.empty())
    throw usage_error("--rules and the compliance section of " + file + " exclude each other: give the rules in one place");
  const bool file_broker = !c.broker.addresses.empty();
  if (file_broker && !o.brokers.empty())
    throw usage_error("--broker and broker.addresses in " + file + " exclude each other: give the broker in one place");
  if (file_broker && (!o.tls_ca.empty() || !o.tls_cert.empty() || !o.tls_key.empty() || !o.token_file.empty()))
    throw usage_error("--tls-* and --token-file go with --broker; " + file + "'s broker has broker.tls and broker.token_file");
  if (o.cuda && c.cuda.enabled)
    throw usage_error("--cuda/--cuda-lib and cuda.enabled in " + file + " exclude each other: give the CUDA probes in one place");
  for (const auto& s : o.syscalls)
    for (const auto& p : c.probes)
      if (p.kind == config::ProbeKind::kSyscall && p.target == s)
        throw usage_error("--syscall " + s + ": " + file + ":" + std::to_string(p.pos.line) + ":" +
                          std::to_string(p.pos.column) + " traces it already");
  // Per-probe flags with no flag probe to apply to: the file's probes have their own settings.
  if (o.uprobes.empty() && o.usdts.empty() && o.syscalls.empty() && !o.cuda)
    for (const char* flag : {"--sample-rate", "--target-qps", "--trace-id-arg", "--latency", "--service", "--tag"})
      if (given(flag))
        throw usage_error(std::string(flag) + " applies to --uprobe/--usdt/--syscall/--cuda probes; the probes of " +
                          file + " take their settings from it");
  // Values: the flag overrides the file's, lists add.
  if (!given("--slow-launch")) o.slow_launch = c.cuda.slow_launch;
  o.cuda_latency = o.cuda_latency || c.cuda.latency;
  std::vector<control::TenantQuotaSpec> tenants;
  for (auto& t : runtime::tenant_quotas_of(c.quotas)) {
    bool replaced = false;
    for (const auto& f : o.tenant_quotas) replaced = replaced || cgroup_key(f.cgroup_path) == cgroup_key(t.cgroup_path);
    if (!replaced) tenants.push_back(std::move(t));
  }
  tenants.insert(tenants.end(), o.tenant_quotas.begin(), o.tenant_quotas.end());
  o.tenant_quotas = std::move(tenants);
  if (!o.default_quota) o.default_quota = runtime::default_quota_of(c.quotas);
  const runtime::ExportFilterSpec from_file = runtime::export_filter_of(c);
  if (!c.compliance.source.empty()) o.export_filter.rules = from_file.rules;
  o.export_filter.error_only = o.export_filter.error_only || from_file.error_only;
  if (!given("--export-sample-rate")) o.export_filter.sample_rate = from_file.sample_rate;
  if (o.ready_file.empty()) o.ready_file = c.ready_file;
}

}  // namespace

std::string trace_flag_for(Setting s) {
  switch (s) {
    case Setting::kRingbufSize: return "--ringbuf-size";
    case Setting::kTenantQuota: return "--tenant-quota";
    case Setting::kTraceIdArg: return "--trace-id-arg";
    case Setting::kTlsClientCert: return "--tls-cert and --tls-key";
    case Setting::kBrokers: return "--broker";
    case Setting::kUprobe: return "--uprobe";
    case Setting::kPodNames: return "kubernetes.pod_names in --config";
  }
  return setting_words(s);
}

void validate(TraceOptions& o) {
  if (!o.cuda_libs.empty()) o.cuda = true;
  // The file first: its problems are reported as FILE:LINE:COL before the flags' are.
  o.config = o.config_file.empty() ? nullptr
                                   : std::make_shared<const config::Config>(config::load_config(o.config_file));
  if (o.uprobes.empty() && o.usdts.empty() && o.syscalls.empty() && !o.cuda && (!o.config || o.config->probes.empty()))
    throw usage_error(o.config ? "nothing to trace: " + o.config_file +
                                     " declares no probes and no --uprobe, --usdt, --syscall or --cuda is given"
                               : "nothing to trace: give at least one --uprobe, --usdt, --syscall or --cuda");
  // One probe per function: the same flag twice would be the same attachment.
  for (const auto& [flags, name] : {std::pair{&o.uprobes, "--uprobe "}, std::pair{&o.usdts, "--usdt "},
                                    std::pair{&o.syscalls, "--syscall "}})
    for (size_t i = 0; i < flags->size(); i++)
      if (std::find(flags->begin(), flags->begin() + static_cast<ptrdiff_t>(i), (*flags)[i]) != flags->begin() + static_cast<ptrdiff_t>(i))
        throw usage_error(std::string(name) + (*flags)[i] + " is given twice");
  for (const auto& u : o.usdts) loader::split_usdt_spec(u);  // malformed: a usage error before anything loads
  o.string_args = 0;
  for (const int i : o.string_arg_list) {
    if (o.usdts.empty()) throw usage_error("--string-arg applies to --usdt probes");
    if (const auto why = config::add_string_arg(o.string_args, i); !why.empty())
      throw usage_error("--string-arg " + std::to_string(i) + ": " + why);
  }
  // A USDT probe has no return to time, and CUDA launches take --cuda-latency: alone, they
  // would make --latency a flag that does nothing.
  if (o.latency && o.uprobes.empty() && o.syscalls.empty() && (!o.usdts.empty() || o.cuda))
    throw usage_error("--latency applies to --uprobe and --syscall probes (a USDT probe has no return; "
                      "CUDA launches take --cuda-latency)");
  if (o.args) {
    if (o.uprobes.empty()) throw usage_error("--args applies to --uprobe probes (a syscall's and a USDT probe's are known)");
    if (*o.args < 0 || *o.args > MCP_MAX_ARGS) throw usage_error("--args must be 0..6, got " + std::to_string(*o.args));
  }
  o.stack = 0;
  if (!o.stack_text.empty()) {
    const auto k = config::parse_stack_kind(o.stack_text);
    if (!k) throw usage_error("--stack must be user, kernel or both, got '" + o.stack_text + "'");
    if (o.uprobes.empty() && o.usdts.empty() && o.syscalls.empty())
      throw usage_error("--stack applies to --uprobe, --usdt and --syscall probes (agent.yaml: a probe's stack:)");
    o.stack = *k;
  }
  o.slow_launch = o.slow_launch_text == "0" ? std::chrono::nanoseconds(0) : parse_duration(o.slow_launch_text);
  o.slow_hold = parse_duration(o.slow_hold_text);
  if (!o.batch_gap_text.empty()) {
    try {
      o.batch_gap = parse_duration_up_to(o.batch_gap_text, std::chrono::seconds(1));
    } catch (const Error& e) {
      throw usage_error(std::string("--batch-gap: ") + e.what());
    }
  }
  if (!valid_sampling_rate(o.sample_rate))
    throw usage_error(fmt::format("--sample-rate must be in {}, got {:g}", kSamplingRateRange, o.sample_rate));
  if (o.format != "json" && o.format != "table")
    throw usage_error("unknown --format '" + o.format + "' (use json or table)");
  if (!o.duration_text.empty()) {
    o.duration = parse_duration(o.duration_text);
    if (o.duration.count() <= 0) throw usage_error("--duration must be positive");
  }
  if (o.pid < 0 || (o.given.count("--pid") && o.pid == 0)) throw usage_error("--pid must be a positive process id");
  if (o.pid > 0 && !o.command.empty()) throw usage_error("--pid and -- COMMAND exclude each other");
  if (o.pid > 0 && kill(o.pid, 0) != 0 && errno == ESRCH)
    throw usage_error("no process with pid " + std::to_string(o.pid));
  if (o.max_events > uint64_t{INT64_MAX})
    throw usage_error("--max-events must be 0 (no limit) to 2^63-1, got " + as_given(o.max_events));
  // Past the largest ring the backlog never reaches the mark: 1G is "never forced".
  if (o.wakeup_bytes < 1 || o.wakeup_bytes > loader::kMaxRingbufBytes)
    throw usage_error("--wakeup-bytes must be 1 to 1G (1073741824), got " + as_given(o.wakeup_bytes));
  o.ringbuf_bytes = parse_size(o.ringbuf_size_text);
  if (o.ringbuf_bytes < 4096 || o.ringbuf_bytes > loader::kMaxRingbufBytes || (o.ringbuf_bytes & (o.ringbuf_bytes - 1)))
    throw usage_error("--ringbuf-size must be a power of two from 4K to 1G, got " + o.ringbuf_size_text);
  o.tags.clear();
  for (const auto& t : o.tag_texts) {
    const auto eq = t.find('=');
    if (eq == std::string::npos || eq == 0) throw usage_error("--tag '" + t + "' is not KEY=VALUE");
    o.tags.emplace_back(t.substr(0, eq), t.substr(eq + 1));
  }
  // The broker refuses such an id on every batch (common/agent_id_rule.h): said at start, not
  // found later as lost events.
  if (!o.agent_id.empty() || o.given.count("--agent-id"))
    if (const auto why = agent_id_problem(o.agent_id)) throw usage_error("--agent-id '" + o.agent_id + "': " + *why);
  // The file's broker (--config) counts as --broker for the flags that go with one.
  const bool any_broker = !o.brokers.empty() || (o.config && !o.config->broker.addresses.empty());
  otlp::finish_otlp_flags(o.otlp);
  const bool any_otlp = !o.otlp.options.endpoint.empty() || (o.config && o.config->otlp);
  if (o.also_stdout && !any_broker && !any_otlp)
    throw usage_error("--also-stdout needs --broker or --otlp-endpoint");
  if (!any_broker && (!o.tls_ca.empty() || !o.token_file.empty() || !o.spool_dir.empty()))
    throw usage_error("--tls-*, --token-file and --spool-dir need --broker");
  if (o.given.count("--target-qps") && !valid_target_qps(o.target_qps))
    throw usage_error(fmt::format("--target-qps must be in {}, got {:g}", kTargetQpsRange, o.target_qps));
  o.tenant_quotas.clear();
  for (const auto& t : o.tenant_quota_texts) o.tenant_quotas.push_back(control::parse_tenant_quota(t));
  if (!o.default_quota_text.empty()) o.default_quota = control::parse_quota(o.default_quota_text);
  if (!o.trace_id_arg_text.empty()) o.trace_id_arg = control::parse_trace_id_arg(o.trace_id_arg_text);
  o.trace_id_prefixes.clear();
  for (const auto& text : o.trace_id_prefix_texts) {
    const auto eq = text.find('=');
    const std::string hex = text.substr(0, eq);
    if (eq == std::string::npos)
      throw usage_error("--trace-id-prefix " + text + ": expected HEX=RATE, e.g. 00af=1");
    if (const auto why = trace_id_prefix_error(hex); !why.empty()) throw usage_error("--trace-id-prefix " + text + ": " + why);
    double rate = 0;
    const std::string rate_text = text.substr(eq + 1);
    const auto [end, ec] = std::from_chars(rate_text.data(), rate_text.data() + rate_text.size(), rate);
    if (ec != std::errc() || end != rate_text.data() + rate_text.size() || !valid_sampling_rate(rate))
      throw usage_error("--trace-id-prefix " + text + ": the rate must be in " + std::string(kSamplingRateRange));
    for (const auto& [digits, r] : o.trace_id_prefixes)
      if (digits == parse_trace_id_prefix(hex)->digits) throw usage_error("--trace-id-prefix " + hex + " is given twice");
    o.trace_id_prefixes.emplace_back(parse_trace_id_prefix(hex)->digits, rate);
  }
  if (!o.trace_id_prefixes.empty() && !o.trace_id_arg)
    throw usage_error("--trace-id-prefix needs --trace-id-arg: a prefix rule decides on the probe's trace id");
  if (!valid_sampling_rate(o.export_sample_rate))
    throw usage_error(fmt::format("--export-sample-rate must be in {}, got {:g}", kSamplingRateRange, o.export_sample_rate));
  o.export_filter = {};
  o.export_filter.error_only = o.error_only;
  o.export_filter.sample_rate = o.export_sample_rate;
  if (!o.rules_file.empty()) {
    std::ifstream in(o.rules_file);
    if (!in) throw usage_error("--rules " + o.rules_file + ": " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    try {
      o.export_filter.rules = std::make_shared<const rules::RuleSet>(rules::RuleSet::compile(text.str()));
    } catch (const rules::RulesError& e) {
      throw usage_error(o.rules_file + ":" + std::to_string(e.pos().line) + ":" + std::to_string(e.pos().column) +
                        ": " + e.reason());
    }
  }
  if (!o.audit_log_dir.empty() && o.rules_file.empty() && !(o.config && !o.config->compliance.source.empty()))
    throw usage_error("--audit-log records what compliance rules decide: give --rules, or --config with a compliance section");
  for (const auto& s : o.syscalls)
    if (s.empty() || s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      throw usage_error("bad --syscall '" + s + "' (expected a name such as getppid)");
  if (o.config) merge_config(o);
  if (o.given.count("--cuda-latency") && !o.cuda && !(o.config && o.config->cuda.enabled))
    throw usage_error("--cuda-latency applies to CUDA probes: give --cuda (or cuda.enabled in --config)");
  // Slow-launch detection measures each launch's latency: it needs the return probe.
  o.cuda_latency = o.cuda_latency || o.slow_launch.count() > 0;
  if (o.config && o.config->cuda.enabled) {
    // The file's CUDA probes time their launches as the merged settings say.
    auto c = std::make_shared<config::Config>(*o.config);
    for (auto& p : c->probes)
      if (p.kind == config::ProbeKind::kCuda) p.latency = o.cuda_latency;
    o.config = std::move(c);
  }
}

}  // namespace mcp::cli
