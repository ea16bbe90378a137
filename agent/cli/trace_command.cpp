#include "cli/trace_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>

#include "cli/child_process.h"
#include "cli/trace_options.h"
#include "clock/timestamper.h"
#include "common/error.h"
#include "cuda/cuda_attach.h"
#include "cuda/cuda_targets.h"
#include "cuda/kernel_symbolizer.h"
#include "forward/agent_id.h"
#include "forward/forwarder.h"
#include "loader/bpf_session.h"
#include "loader/target_resolver.h"
#include "mcp_abi.h"
#include "output/stream_sink.h"
#include "pipeline/ring_consumer.h"
#include "runtime/control_loop.h"
#include "runtime/export_filter.h"
#include "runtime/interval_counts.h"
#include "runtime/readiness.h"

#ifndef MCP_VERSION
#define MCP_VERSION "0.0.0"
#endif

namespace mcp::cli {
namespace {

// SIGINT/SIGTERM received: the first ends tracing, a later one ends the wait for the broker.
std::atomic<int> g_signals{0};

void on_signal(int) { g_signals.fetch_add(1); }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Launch latencies per kernel, for the CUDA summary.
using KernelLatencies = std::map<std::string, std::vector<uint64_t>>;

void print_kernels(KernelLatencies& kernels) {
  if (kernels.empty()) return;
  fprintf(stderr, "%-48s %10s %14s %14s\n", "CUDA KERNEL", "LAUNCHES", "P50_LAUNCH_us", "P99_LAUNCH_us");
  for (auto& [name, d] : kernels) {
    std::sort(d.begin(), d.end());
    auto pct = [&](double p) { return static_cast<double>(d[static_cast<size_t>(p * static_cast<double>(d.size() - 1))]) / 1000.0; };
    fprintf(stderr, "%-48s %10zu %14.1f %14.1f\n", name.c_str(), d.size(), pct(0.5), pct(0.99));
  }
}

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

// Attaches the CUDA API probes; returns probe id -> the API name users see.
std::map<uint32_t, std::string> attach_cuda(loader::BpfSession& session, const TraceOptions& o, pid_t target,
                                            const loader::ProbeConfig& base, cuda::KernelSymbolizer& symbolizer) {
  const std::string exe = executable_of(o);
  std::vector<std::string> libs = o.cuda_libs;
  if (libs.empty() && exe.empty()) {
    for (const char* name : {"libcudart", "libcuda"}) {  // system-wide: the linker cache's
      try {
        libs.push_back(loader::resolve_binary(name, 0));
      } catch (const Error&) {
      }
    }
  }
  std::map<uint32_t, std::string> apis;
  if (!exe.empty()) symbolizer.add_file(exe);
  for (const auto& file : cuda::find_cuda_files(o.command.empty() ? o.pid : 0, exe, libs))
    for (const auto& p : cuda::attach_cuda_file(session, file, target, base, symbolizer)) apis[p.id] = p.api->display;
  if (apis.empty()) throw runtime_error("no CUDA API functions found to probe");
  return apis;
}

void print_tenants(const loader::BpfSession& session, const control::TenantQuotaTable& table) {
  fprintf(stderr, "%-48s %8s %12s %12s %12s\n", "TENANT (cgroup)", "BUCKET", "SEEN", "KEPT", "QUOTA_DROP");
  for (const auto& t : table.tenants) {
    const auto c = session.tenant_counters(t.bucket);
    fprintf(stderr, "%-48s %8u %12llu %12llu %12llu\n", t.cgroup_path.c_str(), t.bucket, (unsigned long long)c.seen,
            (unsigned long long)c.kept, (unsigned long long)c.quota_dropped);
  }
  loader::ProbeCounters rest;
  for (uint32_t b = 0; b < control::kTenantBuckets; b++) {
    if (table.configured[b]) continue;
    const auto c = session.tenant_counters(b);
    rest.seen += c.seen;
    rest.kept += c.kept;
    rest.quota_dropped += c.quota_dropped;
  }
  fprintf(stderr, "%-48s %8s %12llu %12llu %12llu\n", "(all other cgroups)", "-", (unsigned long long)rest.seen,
          (unsigned long long)rest.kept, (unsigned long long)rest.quota_dropped);
  for (const auto& w : table.warnings) fprintf(stderr, "mcp-agent: warning: %s\n", w.c_str());
}

// How latency probes take their returns, and (with BPF statistics on) how often each
// program ran: the trap count a traced call costs.
void print_return_mode(const loader::BpfSession& session) {
  bool latency = false;
  for (const auto& p : session.probes()) latency |= p.latency && p.family != loader::ProbeFamily::kSyscall;
  if (latency)
    fprintf(stderr, "mcp-agent: uprobe returns: %s\n",
            session.uprobe_sessions() ? "session (only calls the entry keeps take the return trap)"
                                      : "uretprobe (every call takes the return trap)");
  std::string runs;
  for (const auto& [name, n] : session.program_runs())
    if (n) runs += " " + name + "=" + std::to_string(n);
  if (!runs.empty()) fprintf(stderr, "mcp-agent: bpf program runs:%s\n", runs.c_str());
}

void print_summary(const loader::BpfSession& session, const runtime::IntervalCounts& counts,
                   const pipeline::RingConsumer& consumer, double seconds) {
  fprintf(stderr, "\nmcp-agent: summary after %.1f s\n", seconds);
  fprintf(stderr, "%-48s %12s %12s %10s %12s %10s %12s %14s\n", "PROBE", "SEEN", "KEPT", "LOST", "QUOTA_DROP",
          "ORPHANED", "DELIVERED", "EST_COUNT");
  for (const auto& p : session.probes()) {
    if (p.internal) continue;
    const auto c = session.counters(p.id);
    fprintf(stderr, "%-48s %12llu %12llu %10llu %12llu %10llu %12llu %14.0f\n", p.name.c_str(),
            (unsigned long long)c.seen, (unsigned long long)c.kept, (unsigned long long)c.lost,
            (unsigned long long)c.quota_dropped, (unsigned long long)c.orphaned,
            (unsigned long long)counts.delivered(p.id), counts.estimates().estimate(p.id));
    if (c.lost)
      fprintf(stderr, "mcp-agent: warning: %s lost %llu events (ring buffer full; raise --ringbuf-size)\n",
              p.name.c_str(), (unsigned long long)c.lost);
  }
  if (consumer.malformed())
    fprintf(stderr, "mcp-agent: warning: %llu malformed records skipped\n", (unsigned long long)consumer.malformed());
  print_return_mode(session);
}

// Waits (bounded by the forwarder's flush timeout) for the broker to acknowledge what was
// kept; a further SIGINT/SIGTERM ends the wait at once.
bool drain_forwarder(Forwarder& forwarder) {
  const int signals = g_signals.load();
  auto give_up = [signals] { return g_signals.load() > signals; };
  if (forwarder.drain(std::chrono::milliseconds(200), give_up)) return true;
  if (give_up()) return false;
  const auto s = forwarder.stats();
  fprintf(stderr, "mcp-agent: waiting up to 10 s for the broker to acknowledge %llu events (Ctrl-C again to stop)\n",
          (unsigned long long)(s.queued + s.unacked));
  return forwarder.drain(std::chrono::milliseconds(9800), give_up);
}

int run_trace(TraceOptions& o) {
  validate(o);
  spdlog::set_level(o.verbose ? spdlog::level::debug : spdlog::level::warn);
  install_signal_handlers();

  std::unique_ptr<ChildProcess> child;
  if (!o.command.empty()) child = std::make_unique<ChildProcess>(o.command);
  const pid_t target = child ? child->pid() : o.pid;

  std::optional<control::TenantQuotaTable> quotas;
  if (!o.tenant_quotas.empty() || o.default_quota) {
    // Buckets with no configured quota and no default stay unlimited (burst 0).
    quotas = control::build_tenant_quota_table(o.tenant_quotas, o.default_quota.value_or(control::Quota{0, 0}),
                                               control::find_cgroup2_mount());
  }

  loader::SessionOptions so;
  so.target_tgid = target;
  so.follow_children = !o.no_follow;
  so.quotas = quotas.has_value();
  so.cuda_slow_ns = static_cast<uint64_t>(o.slow_launch.count());
  so.cuda_hold_ns = static_cast<uint64_t>(o.slow_hold.count());
  so.ringbuf_bytes = o.ringbuf_bytes;
  so.wakeup_bytes = o.wakeup_bytes;
  auto session = loader::BpfSession::open(so);

  loader::ProbeConfig config;
  config.threshold = probability_to_threshold(o.sample_rate);
  if (o.trace_id_arg) {
    config.trace_id_arg = o.trace_id_arg->arg_index;
    config.trace_id_bytes16 = o.trace_id_arg->format == control::TraceIdFormat::kBytes16;
    config.trace_id_integer = o.trace_id_arg->format == control::TraceIdFormat::kU64;
  }
  for (const auto& spec : o.uprobes) {
    // A child has not exec'd yet: its maps are ours, so resolve through the linker cache.
    const auto t = loader::resolve_uprobe(spec, child ? 0 : o.pid);
    if (!child) {
      if (const auto w = loader::mapping_warning(o.pid, t.binary, t.name()); !w.empty())
        fprintf(stderr, "mcp-agent: warning: %s\n", w.c_str());
    }
    // Following children, the pid tree filter runs in the kernel: attach to every process.
    session->add_uprobe(t, o.latency, o.no_follow ? target : -1, config);
  }
  for (const auto& name : o.syscalls) session->add_syscall(name, config, o.latency);
  cuda::KernelSymbolizer symbolizer;
  std::map<uint32_t, std::string> cuda_apis;
  if (o.cuda) cuda_apis = attach_cuda(*session, o, target, config, symbolizer);
  KernelLatencies kernels;

  int out_fd = STDOUT_FILENO;
  if (!o.output.empty()) {
    out_fd = open(o.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) throw runtime_error("cannot open " + o.output + ": " + std::strerror(errno));
  }
  clock::Timestamper timestamper;
  timestamper.start();
  std::unique_ptr<output::StreamSink> printer;
  if (o.brokers.empty() || o.also_stdout)
    printer = std::make_unique<output::StreamSink>(output::make_formatter(o.format), out_fd);
  std::unique_ptr<runtime::ControlLoop> control;  // created below; policies may arrive before it runs
  std::mutex control_mu;
  std::unique_ptr<Forwarder> forwarder;
  if (!o.brokers.empty()) {
    ForwarderOptions fo;
    fo.brokers = parse_broker_list(o.brokers);
    // A run of its own id: two traces on one host must not dedup each other's batches. With a
    // spool directory the id is kept there, so a later run's replays are deduplicated.
    fo.agent_id = !o.agent_id.empty() ? o.agent_id : !o.spool_dir.empty() ? stable_agent_id(o.spool_dir) : "";
    fo.spool_dir = o.spool_dir;
    fo.compression = parse_compression(o.compression);
    fo.tls = {o.tls_ca, o.tls_cert, o.tls_key};
    fo.token_file = o.token_file;
    fo.on_policy = [&](const PolicyUpdate& p) {
      if (!p.service.empty() && p.service != o.service) return;
      std::lock_guard lock(control_mu);
      const int n = control ? control->apply_policy(p.probe, p.sampling_rate, p.target_qps) : 0;
      spdlog::info("policy for service '{}' probe '{}': rate {} target {} -> {} probe(s)", p.service, p.probe,
                   p.sampling_rate, p.target_qps, n);
    };
    fo.on_broker_hlc = [&timestamper](uint64_t hlc) { timestamper.merge_remote(hlc); };
    forwarder = make_forwarder(std::move(fo));
  }
  runtime::IntervalCounts counts(MCP_MAX_PROBES);  // DELIVERED, EST_COUNT, the wire's ProbeCounts
  runtime::ExportFilter filter;
  const auto close_interval = [&] {
    auto out = counts.close(*session, [&](uint32_t) { return o.service; });
    if (forwarder && !out.empty()) forwarder->consume_counts(out);
  };
  uint64_t printed = 0;
  pipeline::RingConsumer consumer(
      session->ringbuf_fd(), [&](uint32_t id) { return pipeline::ProbeRef{session->probe_name(id), session->probe_nargs(id)}; },
      [&](Event& e) {
        if (e.kind == EventKind::kCuda) {
          e.cuda.api = cuda_apis[e.probe_id];
          if (!symbolizer.process(e)) return;  // bookkeeping, not an API call to show
          if (!e.cuda.kernel.empty()) kernels[e.cuda.kernel].push_back(e.duration_ns);
        }
        timestamper.stamp(e);
        if (!o.service.empty()) e.service = o.service;
        if (!o.tags.empty()) e.tags = o.tags;
        if (!filter.keep(o.export_filter, e)) return;
        counts.on_delivered(e);
        if (o.max_events && printed >= o.max_events) return;
        if (printer) printer->consume(e);
        if (forwarder) forwarder->consume(e);
        printed++;
      });

  {
    runtime::ControlSettings cs;
    if (o.target_qps > 0) cs.target_qps = o.target_qps;
    cs.accept_policies = forwarder != nullptr;
    cs.quotas = quotas;
    std::lock_guard lock(control_mu);
    control = std::make_unique<runtime::ControlLoop>(*session, std::move(cs));
    control->start();
  }
  session->track_process_tree();
  if (child) child->start();  // an exec failure is reported before readiness
  {
    const auto probes = session->probes();
    runtime::announce_ready(std::count_if(probes.begin(), probes.end(), [](const auto& p) { return !p.internal; }),
                            o.ready_file);
  }
  const auto start = std::chrono::steady_clock::now();
  auto next_interval = start + std::chrono::seconds(1);
  while (g_signals.load() == 0) {
    consumer.poll(pipeline::kPollTimeoutMs);
    if (const auto now = std::chrono::steady_clock::now(); now >= next_interval) {
      close_interval();
      next_interval = now + std::chrono::seconds(1);
    }
    if (printer) printer->flush();
    if (o.max_events && printed >= o.max_events) break;
    if (o.duration.count() && std::chrono::steady_clock::now() - start >= o.duration) break;
    // The traced tree is gone: the command and every descendant (like strace -f), or --pid's.
    if (child ? child->poll_exit() && !session->tree_alive() : o.pid > 0 && !session->tree_alive()) break;
  }
  // Detach first, so nothing is kept after the last drain: then every kept event
  // is delivered, lost or orphaned, and the summary adds up.
  control->stop();
  session->detach_all();
  consumer.drain();
  close_interval();
  if (printer) printer->flush();
  bool delivered = true;
  if (forwarder) delivered = drain_forwarder(*forwarder);
  if (out_fd != STDOUT_FILENO) close(out_fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.quiet_summary) {
    print_summary(*session, counts, consumer, secs);
    if (quotas) print_tenants(*session, *quotas);
    print_kernels(kernels);
    if (forwarder) {
      const auto s = forwarder->stats();
      fprintf(stderr,
              "forwarder: broker %s, sent %llu, acked %llu, spooled %llu bytes, dropped %llu, unreadable %llu, "
              "errors %llu\n",
              s.broker.c_str(), (unsigned long long)s.sent, (unsigned long long)s.acked,
              (unsigned long long)s.spooled_bytes, (unsigned long long)s.dropped_oldest,
              (unsigned long long)s.unreadable_events, (unsigned long long)s.forward_errors);
    }
  }
  if (forwarder) {
    const Undelivered u = undelivered_of(forwarder->stats());
    if (u.any() || !delivered) {
      fprintf(stderr, "mcp-agent: %s\n", u.any() ? u.describe().c_str() : "broker did not acknowledge in time");
      return 1;
    }
  }
  return 0;
}

}  // namespace

void add_trace_command(CLI::App& app, CommandAction& action) {
  auto options = std::make_shared<TraceOptions>();
  auto* sub = app.add_subcommand("trace", "Trace user functions and syscalls once, printing events to stdout");
  add_trace_options(*sub, *options);
  sub->callback([options, &action] { action = [options] { return run_trace(*options); }; });
}

void add_version_command(CLI::App& app, CommandAction& action) {
  auto* sub = app.add_subcommand("version", "Print the version");
  sub->callback([&action] {
    action = [] {
      printf("mcp-agent %s\n", MCP_VERSION);
      return 0;
    };
  });
}

}  // namespace mcp::cli
