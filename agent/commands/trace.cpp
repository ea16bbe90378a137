#include "commands/trace.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "cli/child_process.h"
#include "cli/trace_options.h"
#include "common/error.h"
#include "config/config.h"
#include "cuda/cuda_targets.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/bpf_session.h"
#include "loader/kernel_features.h"
#include "loader/target_resolver.h"
#include "loader/usdt_notes.h"
#include "reload/diff.h"
#include "runtime/config_spec.h"
#include "runtime/probe_set.h"
#include "runtime/runtime.h"

#ifndef MCP_VERSION
#define MCP_VERSION "0.0.0"
#endif

namespace mcp::commands {
using namespace mcp::cli;  // the cli library this command fronts
namespace {

std::string executable_of(const TraceOptions& o) {
  if (!o.command.empty()) {
    try {
      return loader::resolve_binary(o.command[0], 0);
    } catch (const Error&) {
      return {};  // the exec will report it
    }
  }
  if (o.pid > 0) {
    char buf[4096];
    const ssize_t n = readlink(("/proc/" + std::to_string(o.pid) + "/exe").c_str(), buf, sizeof(buf) - 1);
    if (n > 0) return std::string(buf, static_cast<size_t>(n));
  }
  return {};
}

// --cuda as configured CUDA probes (the daemon's kind): --cuda-lib's files, or the
// executable's own (static runtime, DT_NEEDED libraries: in place before it starts) and
// discovery ("*") of every CUDA library the traced processes load later, from any path.
std::vector<config::ProbeSpec> cuda_specs(const TraceOptions& o) {
  std::vector<std::string> files;
  for (const auto& lib : o.cuda_libs) files.push_back(loader::resolve_binary(lib, o.command.empty() ? o.pid : 0));
  if (o.cuda_libs.empty()) {
    files = cuda::linked_cuda_files(executable_of(o));
    files.insert(files.begin(), config::kCudaDiscover);
  }
  std::vector<config::ProbeSpec> specs;
  for (const auto& f : files) {
    config::ProbeSpec p;
    p.kind = config::ProbeKind::kCuda;
    p.target = f;
    p.latency = o.cuda_latency;
    if (o.target_qps > 0) p.sampling.target_qps = o.target_qps;
    else p.sampling.rate = o.sample_rate;
    p.service = o.service;
    p.tags = o.tags;
    if (std::none_of(specs.begin(), specs.end(), [&](const auto& s) { return s.key() == p.key(); }))
      specs.push_back(std::move(p));
  }
  return specs;
}

// --uprobe and --syscall as configured probes, so `trace` attaches, labels, tunes and follows
// them as `run` does (one attach route: a binary replaced while it runs is followed too).
std::vector<config::ProbeSpec> flag_specs(const TraceOptions& o, bool child) {
  std::vector<config::ProbeSpec> specs;
  const auto add = [&](config::ProbeKind kind, std::string target, std::string symbol) {
    config::ProbeSpec p;
    p.kind = kind;
    p.target = std::move(target);
    p.symbol = std::move(symbol);
    p.latency = o.latency && kind != config::ProbeKind::kUsdt;  // a USDT probe has no return
    if (kind == config::ProbeKind::kUsdt) p.string_args = o.string_args;
    if (kind == config::ProbeKind::kUprobe && o.args) p.args = static_cast<uint8_t>(*o.args);
    p.stack = o.stack;
    if (o.target_qps > 0) p.sampling.target_qps = o.target_qps;
    else p.sampling.rate = o.sample_rate;
    // The kernel decides on the trace id: every call is needed, so no sampling windows.
    if (o.trace_id_arg) {
      p.trace_id = *o.trace_id_arg;
      p.sampling.consistent = true;
    }
    p.service = o.service;
    p.tags = o.tags;
    specs.push_back(std::move(p));
  };
  // A child has not exec'd yet: its maps are ours, so resolve through the linker cache.
  // --pid's files are resolved as that process sees them (its root, its libraries).
  // A function a wildcard and another flag both name is one probe; a file is warned about once.
  std::set<std::string> checked;
  std::map<std::pair<std::string, uint64_t>, std::string> addresses;  // (file, offset) -> the symbol probing it
  const auto add_file_probe = [&](config::ProbeKind kind, const loader::UprobeTarget& t, bool from_pattern = false) {
    if (std::any_of(specs.begin(), specs.end(),
                    [&](const auto& p) { return p.kind == kind && p.target == t.binary && p.symbol == t.symbol; }))
      return;
    if (kind == config::ProbeKind::kUprobe) {
      // Two names of one function (aliases): one probe, or each call would be counted twice.
      const auto [it, fresh] = addresses.emplace(std::pair{t.binary, t.offset}, t.symbol);
      if (!fresh) {
        fprintf(stderr, "mcp-agent: warning: %s:%s is %s (the same address): probed once\n", t.name().c_str(),
                t.symbol.c_str(), it->second.c_str());
        return;
      }
      if (t.ifunc)
        fprintf(stderr,
                "mcp-agent: warning: %s:%s is an IFUNC resolver: the dynamic linker calls it once per process to "
                "pick an implementation, so it sees almost none of the calls; probe the implementation this CPU "
                "uses instead (e.g. __%s_avx2 in a libc with symbols) or the callers\n",
                t.name().c_str(), t.symbol.c_str(), t.symbol.c_str());
    }
    if (!child && checked.insert(t.binary).second)
      if (const auto w = loader::mapping_warning(o.pid, t.binary, t.name()); !w.empty())
        fprintf(stderr, "mcp-agent: warning: %s\n", w.c_str());
    add(kind, t.binary, t.symbol);
    specs.back().from_pattern = from_pattern;
  };
  const pid_t in = child ? 0 : o.pid;
  for (const auto& flag : o.uprobes) {
    const auto [binary, symbol] = loader::split_uprobe_spec(flag);
    if (!loader::is_symbol_pattern(symbol)) {
      add_file_probe(config::ProbeKind::kUprobe, loader::resolve_uprobe(flag, in));
      continue;
    }
    // A wildcard: one probe per matching function, as bpftrace's uprobe:BIN:PATTERN.
    const auto targets = loader::resolve_uprobe_pattern(binary, symbol, in);
    if (targets.size() + specs.size() > MCP_MAX_CONFIGURED_PROBES)
      throw usage_error("--uprobe " + flag + " matches " + std::to_string(targets.size()) + " functions of " +
                        targets.front().binary + "; an agent holds at most " +
                        std::to_string(MCP_MAX_CONFIGURED_PROBES) + " probes: narrow the pattern");
    for (const auto& t : targets) add_file_probe(config::ProbeKind::kUprobe, t, true);
  }
  for (const auto& flag : o.usdts) add_file_probe(config::ProbeKind::kUsdt, loader::resolve_usdt(flag, in));
  for (const auto& name : o.syscalls) add(config::ProbeKind::kSyscall, name, "");
  if (specs.size() > MCP_MAX_CONFIGURED_PROBES)
    throw usage_error("the flags name " + std::to_string(specs.size()) + " probes; an agent holds at most " +
                      std::to_string(MCP_MAX_CONFIGURED_PROBES));
  return specs;
}

// --list-usdt BINARY: one line per probe (its sites merged), as --usdt names it, with the
// argument specs of its first site.
int list_usdt(const TraceOptions& o) {
  const std::string file = loader::resolve_binary(o.list_usdt, o.pid);
  const auto sites = loader::read_usdt_probes(file);
  std::vector<std::pair<const loader::UsdtProbe*, size_t>> probes;  // first site, site count
  for (const auto& s : sites) {
    auto it = std::find_if(probes.begin(), probes.end(), [&](const auto& p) {
      return p.first->provider == s.provider && p.first->name == s.name;
    });
    if (it == probes.end()) probes.emplace_back(&s, 1);
    else it->second++;
  }
  if (probes.empty()) fprintf(stderr, "mcp-agent: %s has no USDT probes (no .note.stapsdt)\n", file.c_str());
  for (const auto& [p, count] : probes)
    printf("usdt:%s:%s:%s\t%zu args%s%s\t%zu site%s%s\n", file.c_str(), p->provider.c_str(), p->name.c_str(),
           p->nargs(), p->args.empty() ? "" : ": ", p->args.c_str(), count, count == 1 ? "" : "s",
           p->semaphore ? "\tsemaphore" : "");
  return 0;
}

// The flags as a runtime spec (probes are attached separately, they need the session).
runtime::RuntimeSpec spec_of(const TraceOptions& o, pid_t target) {
  runtime::RuntimeSpec spec;
  spec.session.target_tgid = target;
  // Following children, the pid tree filter runs in the kernel: uprobes attach to every
  // process; with --no-follow to the traced one only.
  spec.uprobe_pid = o.no_follow ? target : -1;
  spec.session.follow_children = !o.no_follow;
  spec.session.cuda_slow_ns = static_cast<uint64_t>(o.slow_launch.count());
  spec.session.cuda_hold_ns = static_cast<uint64_t>(o.slow_hold.count());
  spec.session.ringbuf_bytes = o.ringbuf_bytes;
  spec.session.sampling_windows = !o.no_windows;
  spec.session.wakeup_bytes = o.wakeup_bytes;
  // In a pod with a service account and NODE_NAME: names too; --config: its kubernetes section.
  spec.pod_names = o.config ? runtime::pod_names_of(*o.config) : k8s::PodNamesSpec{};
  spec.control.quotas = runtime::quota_table(o.tenant_quotas, o.default_quota);  // merged with --config's
  spec.session.quotas = spec.control.quotas.has_value();
  // Every probe is a configured one (run_trace): --target-qps steers the flag probes, the
  // file's have their own rates and targets, each through set_target().
  spec.control.probe_targets = true;
  const bool file_broker = o.config && !o.config->broker.addresses.empty();
  spec.control.accept_policies = !o.brokers.empty() || file_broker;
  spec.policy_service = o.service;
  spec.export_filter = o.export_filter;
  // --otlp-endpoint wins over the file's exporter.otlp.
  std::optional<otlp::ExporterOptions> otlp_options;
  if (!o.otlp.options.endpoint.empty()) otlp_options = o.otlp.options;
  else if (o.config && o.config->otlp) otlp_options = o.config->otlp;
  const bool otlp = otlp_options.has_value();
  if ((o.brokers.empty() && !file_broker && !otlp) || o.also_stdout) spec.stream = runtime::StreamSpec{o.format, o.output};
  if (!o.brokers.empty() || file_broker) {
    ForwarderOptions fo;
    if (file_broker) {
      fo = runtime::forwarder_of(o.config->broker);
      if (o.given.count("--compression")) fo.compression = parse_compression(o.compression);
    } else {
      fo.brokers = parse_broker_list(o.brokers);
      fo.compression = parse_compression(o.compression);
      fo.tls = {o.tls_ca, o.tls_cert, o.tls_key};
      fo.token_file = o.token_file;
    }
    fo.spool_dir = o.spool_dir;
    if (o.batch_gap) fo.batch_gap = *o.batch_gap;  // else the file's (forwarder_of) or the default
    spec.broker = std::move(fo);
  }
  spec.otlp = std::move(otlp_options);
  // --audit-log wins over the file's compliance.audit_log.
  if (!o.audit_log_dir.empty()) spec.audit = audit::AuditOptions{o.audit_log_dir};
  else if (o.config) spec.audit = runtime::audit_options_of(o.config->compliance);
  // --agent-id, else the spool directory's (a later run's replays are deduplicated), else the run's own.
  spec.identity = {o.agent_id, false, o.spool_dir};
  spec.max_events = o.max_events;
  spec.duration = o.duration;
  spec.ready_file = o.ready_file;
  spec.summary = !o.quiet_summary;
  return spec;
}

// Same binary as either spelling gives it: the strings match, or both name one existing file.
bool same_binary(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

// A --uprobe the file already declares would attach twice and print every call twice; as
// with --syscall, that is a usage error naming the file's entry.
void reject_uprobes_the_file_traces(const TraceOptions& o) {
  if (!o.config) return;
  for (const auto& flag : o.uprobes) {
    const auto [binary, symbol] = loader::split_uprobe_spec(flag);
    for (const auto& p : o.config->probes)
      if (p.kind == config::ProbeKind::kUprobe && p.symbol == symbol && same_binary(p.target, binary))
        throw usage_error("--uprobe " + flag + ": " + o.config_file + ":" + std::to_string(p.pos.line) + ":" +
                          std::to_string(p.pos.column) + " traces it already");
  }
}

int run_trace(TraceOptions& o) {
  if (!o.list_usdt.empty()) return list_usdt(o);
  validate(o);
  reject_uprobes_the_file_traces(o);
  spdlog::set_level(o.verbose ? spdlog::level::debug : spdlog::level::warn);
  runtime::Runtime::install_signal_handlers();  // before the child is forked

  std::unique_ptr<ChildProcess> child;
  if (!o.command.empty()) child = std::make_unique<ChildProcess>(o.command);
  const pid_t target = child ? child->pid() : o.pid;

  // The flags' probes, --config's and --cuda's, attached (and labelled, tuned, followed) as
  // `run` attaches them.
  config::Config probes = o.config ? *o.config : config::Config{};
  for (auto& p : flag_specs(o, child != nullptr)) probes.probes.push_back(std::move(p));
  if (o.cuda)
    for (auto& p : cuda_specs(o)) probes.probes.push_back(std::move(p));

  auto spec = spec_of(o, target);
  // The flags' probes never change: probe slots for them, twice over (a replaced file), and
  // for what CUDA discovery finds; a --config file may grow on reload.
  if (!o.config)
    spec.session.probe_slots =
        static_cast<uint32_t>(std::min<size_t>(MCP_MAX_PROBES, 512 + 2 * probes.probes.size()));
  runtime::Runtime rt(std::move(spec));
  auto& session = rt.session();
  if (o.cuda)  // its kernels' host functions: named even when it exits before its events are read
    if (const auto exe = executable_of(o); !exe.empty()) rt.symbolizer().add_file(exe);
  // Without attach cookies libbpf places a USDT probe per process, from the process's own
  // mappings: the command's probes wait until it has exec'd (stopped there, below).
  config::Config at_exec;
  if (child && !loader::KernelFeatures::get().attach_cookie) {
    auto usdt = std::stable_partition(probes.probes.begin(), probes.probes.end(),
                                      [](const auto& p) { return p.kind != config::ProbeKind::kUsdt; });
    at_exec.probes.assign(std::make_move_iterator(usdt), std::make_move_iterator(probes.probes.end()));
    probes.probes.erase(usdt, probes.probes.end());
  }
  rt.probes().apply(reload::diff(config::Config{}, probes));
  if (o.config) rt.probes().apply_services(*o.config);
  for (const auto& [digits, rate] : o.trace_id_prefixes)
    rt.control().apply_policy(runtime::ProbePolicy{
        "", "", rate, 0, [](const loader::ProbeInfo& p) { return p.trace_id; }, digits});

  rt.start();
  session.track_process_tree();
  // An exec failure is reported before readiness. With --cuda, the command's mappings as exec
  // left them (the executable, its static CUDA runtime), read while it is stopped there: where
  // the kernel cannot place launches (no bpf_find_vma), a program that exits within a
  // millisecond is named from these. Before run(): the symbolizer is the consumer thread's then.
  if (child) {
    if (o.cuda || !at_exec.probes.empty())
      child->start([&](pid_t pid) {
        if (o.cuda) rt.symbolizer().remember_maps(pid);
        if (!at_exec.probes.empty()) rt.probes().apply(reload::diff(config::Config{}, at_exec));
      });
    else child->start();
  }
  runtime::RunHooks hooks;
  // The traced tree is gone: the command and every descendant (like strace -f), or --pid's.
  hooks.finished = [&] {
    // A broker that refuses the credential refuses every retry: the run ends, its summary says why.
    if (!rt.broker_refusal().empty()) return true;
    return child ? child->poll_exit() && !session.tree_alive() : o.pid > 0 && !session.tree_alive();
  };
  const int rc = rt.run(hooks);
  if (!o.quiet_summary)
    for (const auto& line : rt.probes().discovered_libraries()) fprintf(stderr, "cuda library: %s\n", line.c_str());
  return rc;
}

}  // namespace

void add_trace_command(CLI::App& app, CommandAction& action) {
  auto options = std::make_shared<TraceOptions>();
  auto* sub = app.add_subcommand("trace", "Trace user functions and syscalls once, printing events to stdout");
  add_trace_options(*sub, *options);
  sub->callback([options, &action] {
    use_setting_spelling(trace_flag_for);
    action = [options] { return run_trace(*options); };
  });
}

void add_version_command(CLI::App& app, CommandAction& action) {
  auto* sub = app.add_subcommand("version", "Print the version and the kernel features the agent found");
  sub->callback([&action] {
    action = [] {
      printf("mcp-agent %s\n", MCP_VERSION);
      // Probing loads test programs: only with the privileges to load BPF.
      try {
        loader::check_environment();
      } catch (const Error& e) {
        if (e.code() == ExitCode::kUsage) throw;  // a bad MCP_KERNEL_FEATURES_OFF is the caller's to fix
        printf("kernel features: not probed (%s)\n", e.what());
        return 0;
      }
      const auto& kf = loader::KernelFeatures::get();
      printf("kernel %s:\n", kf.release.c_str());
      for (const auto& f : kf.list())
        printf("  %-16s %-4s %s (%s)%s%s\n", f.name, f.present ? "yes" : "off", f.needs, f.since,
               f.present || !*f.without ? "" : ": ", f.present ? "" : f.without);
      return 0;
    };
  });
}

}  // namespace mcp::commands
