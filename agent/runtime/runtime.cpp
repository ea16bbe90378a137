#include "runtime/runtime.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdio>

#include "cgroup/cgroup2.h"
#include "clock/timestamper.h"
#include "common/agent_id_rule.h"
#include "common/setting_names.h"
#include "cuda/kernel_symbolizer.h"
#include "symbolize/stack_symbolizer.h"
#include "enrich/stages.h"
#include "forward/agent_id.h"
#include "loader/kernel_features.h"
#include "metrics/names.h"
#include "metrics/registry.h"
#include "otlp/event_sink.h"
#include "output/formatter.h"
#include "mcp_abi.h"
#include "pipeline/ring_consumer.h"
#include "runtime/interval_counts.h"
#include "runtime/policy_match.h"
#include "runtime/probe_set.h"
#include "runtime/readiness.h"
#include "runtime/sinks.h"

namespace mcp::runtime {
namespace {

// SIGINT/SIGTERM received (process-wide, as signal dispositions are); with a runtime's own
// request_stop() calls, the first ends the run and a later one the shutdown wait.
std::atomic<int> g_stops{0};

void on_signal(int) { g_stops.fetch_add(1); }

std::string agent_id_of(const IdentitySpec& spec) {
  if (!spec.id.empty()) return spec.id;
  if (const char* node = spec.node_name_env ? getenv("NODE_NAME") : nullptr; node && *node) {
    if (const auto why = agent_id_problem(node))
      throw usage_error("NODE_NAME '" + std::string(node) + "' cannot be an agent id: " + *why);
    return node;
  }
  if (!spec.state_dir.empty()) return stable_agent_id(spec.state_dir);
  return unique_agent_id();
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

// Launches per kernel; the latency columns only from launches that were timed (--cuda-latency).
void print_kernels(std::map<std::string, Runtime::KernelLaunches> kernels) {
  if (kernels.empty()) return;
  fprintf(stderr, "%-48s %10s %12s %14s %14s\n", "CUDA KERNEL", "LAUNCHES", "EST_LAUNCHES", "P50_LAUNCH_us",
          "P99_LAUNCH_us");
  for (auto& [name, k] : kernels) {
    auto& d = k.durations;
    std::sort(d.begin(), d.end());
    auto pct = [&](double p) {
      return d.empty() ? std::string("-")
                       : fmt::format("{:.1f}", static_cast<double>(d[static_cast<size_t>(p * static_cast<double>(d.size() - 1))]) / 1000.0);
    };
    fprintf(stderr, "%-48s %10zu %12.0f %14s %14s\n", name.c_str(), k.launches, k.estimated, pct(0.5).c_str(),
            pct(0.99).c_str());
  }
}

// Probes whose rate could use time windows: how each was counted (calls, windows, or no
// estimate at all, and why), how much of the run windows covered, and the 99.9% range of
// EST_COUNT (loader/estimate_modes.h). A probe that cannot be estimated prints no number.
void print_windows(const loader::BpfSession& session, const IntervalCounts& counts) {
  bool header = false;
  std::vector<std::string> notes;
  for (const auto& p : session.probes()) {
    const auto w = session.window_stats(p.id);
    const auto tracker = session.estimate_tracker(p.id);
    if (!w || !tracker || p.internal) continue;  // window stats exist only beside a tracker
    if (!header) {
      fprintf(stderr, "%-48s %8s %10s %10s %10s %8s %12s %s\n", "SAMPLING WINDOWS", "WINDOWS", "NOMINAL%", "COVERED%",
              "ATTACH_us", "MODE", "EST_COUNT", "RANGE_99.9%");
      header = true;
    }
    const double est = counts.estimates().estimate(p.id);
    const std::string mode = loader::estimate_mode_name(tracker->mode());
    std::string shown = fmt::format("{:.0f}", est), range;
    if (const auto r = tracker->range(est); !r.bounded) {
      shown = "-";
      range = "none";
      notes.push_back(fmt::format("mcp-agent: warning: {}: no estimate: {}; --no-windows counts every call exactly "
                                  "(each call then traps, about {:.1f} us here)",
                                  p.name, tracker->reason(), session.trap_cost_ns() / 1000));
    } else {
      range = fmt::format("{:.0f}..{:.0f}", r.lo, r.hi);
      notes.push_back(fmt::format("mcp-agent: {}: {}: {}", p.name, mode, tracker->reason()));
    }
    fprintf(stderr, "%-48s %8llu %10.2f %10.2f %10.1f %8s %12s %s\n", p.name.c_str(), (unsigned long long)w->windows,
            100 * w->fraction, 100 * w->covered(),
            w->windows ? static_cast<double>(w->attach_ns) / 1e3 / static_cast<double>(w->windows) : 0.0, mode.c_str(),
            shown.c_str(), range.c_str());
  }
  for (const auto& n : notes) fprintf(stderr, "%s\n", n.c_str());
}

// A probe whose estimate cannot be given (loader/estimate_modes.h): its EST_COUNT is withheld.
bool estimable(const loader::BpfSession& session, uint32_t id) {
  const auto t = session.estimate_tracker(id);
  return !t || t->estimable();
}

size_t attached_probes(const loader::BpfSession& session) {
  const auto probes = session.probes();
  return static_cast<size_t>(std::count_if(probes.begin(), probes.end(), [](const auto& p) { return !p.internal; }));
}

}  // namespace

void Runtime::install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

Runtime::Runtime(RuntimeSpec spec) : spec_(std::move(spec)) {
  install_signal_handlers();
  session_ = loader::BpfSession::open(spec_.session);
  control_ = std::make_unique<ControlLoop>(*session_, spec_.control);
  symbolizer_ = std::make_unique<cuda::KernelSymbolizer>();
  probes_ = std::make_unique<ProbeSet>(*session_, *control_, *symbolizer_, spec_.uprobe_pid);
  stacks_ = std::make_unique<symbolize::StackSymbolizer>();
  probes_->on_file_attached([this](const std::string& file) { stacks_->add_file(file); });
  clock_ = std::make_unique<clock::Timestamper>();
  counts_ = std::make_unique<IntervalCounts>(MCP_MAX_PROBES);
  if (spec_.broker || spec_.otlp) agent_id_ = agent_id_of(spec_.identity);
}

Runtime::~Runtime() {
  // The consumer and the sinks reference the session and the clock: they go first.
  refresher_ = {};
  consumer_.reset();
  sinks_.clear();
  if (control_) control_->stop();
}

void Runtime::request_stop() { requests_.fetch_add(1); }
int Runtime::stops() const { return g_stops.load() + requests_.load(); }
bool Runtime::stop_requested() const { return stops() > 0; }

std::string Runtime::service_of(uint32_t probe_id) const {
  const auto meta = probes_->meta(probe_id);
  return meta ? meta->service : std::string();
}

void Runtime::start() {
  clock_->start();
  if (spec_.stream) sinks_.push_back(std::make_unique<StreamFileSink>(*spec_.stream));
  if (spec_.broker) {
    ForwarderOptions fo = *spec_.broker;
    fo.agent_id = agent_id_;
    fo.on_policy = [this](const PolicyUpdate& p) {
      apply_broker_policy(p);
      refusals_due_.store(true);
    };
    fo.on_policy_set = [this](const std::vector<PolicyUpdate>& set) {
      // Policies removed while this agent was away are not in the set: undo them first.
      for (const auto& [service, probe, prefix] : control_->policy_keys()) {
        const bool kept = std::any_of(set.begin(), set.end(), [&](const PolicyUpdate& u) {
          return u.service == service && u.probe == probe && u.trace_id_prefix == prefix;
        });
        if (!kept) apply_broker_policy(PolicyUpdate{service, probe, 0, 0, {}, prefix, true});
      }
      for (const auto& p : set) apply_broker_policy(p);
      refusals_due_.store(true);
    };
    fo.on_broker_hlc = [clock = clock_.get()](uint64_t hlc) { clock->merge_remote(hlc); };
    auto sink = std::make_unique<BrokerSink>(make_forwarder(std::move(fo)));
    forwarder_ = &sink->forwarder();
    sinks_.push_back(std::move(sink));
  }
  std::shared_ptr<otlp::OtlpSink> otlp_sink;
  if (spec_.otlp) {
    otlp_sink = std::make_shared<otlp::OtlpSink>(*spec_.otlp, otlp::Origin{agent_id_, host_name()});
    sinks_.push_back(otlp_sink);
  }
  for (const auto& sink : spec_.sinks) sinks_.push_back(sink);

  if (spec_.audit) {
    audit::AuditOptions o = *spec_.audit;
    if (o.node.empty()) o.node = agent_id_.empty() ? host_name() : agent_id_;
    audit_ = std::make_unique<audit::AuditLog>(std::move(o));
    filter_.set_audit(audit_.get());
    // With OTLP on, the trail goes to the collector too, as log records beside the events.
    if (otlp_sink)
      audit_->set_observer([otlp_sink](uint64_t seq, uint64_t ts_ns, const std::string& hash, std::string_view line) {
        otlp_sink->consume_audit(otlp::AuditEntry{seq, ts_ns, hash, std::string(line)});
      });
  }
  chain_.add(std::make_unique<enrich::PodIdentityStage>());
  chain_.add(std::make_unique<enrich::ProbeLabelStage>(*probes_));
  chain_.add(std::make_unique<enrich::CudaSymbolStage>(*symbolizer_));
  chain_.add(std::make_unique<enrich::StackSymbolStage>(*stacks_));
  chain_.add(std::make_unique<enrich::ClockStage>(*clock_));
  if (spec_.pod_names) {
    auto stage = std::make_unique<enrich::PodNamesStage>(*spec_.pod_names);
    auto& names = stage->names();
    names.start();
    if (names.unavailable().empty() && !names.wait_synced(spec_.pod_names_sync))
      spdlog::warn("pod watch: no pod list after {} ms; events get pod names once it comes", spec_.pod_names_sync.count());
    pod_names_ = &names;
    // Pod and namespace tenants and selectors follow the same watch (the control loop writes them).
    if (names.unavailable().empty()) {
      try {
        control_->set_pod_cgroups(
            std::make_unique<k8s::PodCgroups>(names.shared_directory(), cgroup::find_cgroup2_mount()));
      } catch (const std::exception& e) {
        control_->set_pod_cgroups(nullptr, e.what());
      }
    } else {
      control_->set_pod_cgroups(nullptr, names.unavailable());
    }
    chain_.add(std::move(stage));
  }
  consumer_ = std::make_unique<pipeline::RingConsumer>(
      session_->ringbuf_fd(),
      [this](uint32_t id) {
        const auto [nargs, declared] = session_->probe_nargs(id);
        return pipeline::ProbeRef{session_->probe_name(id), nargs, declared};
      },
      [this](Event& e) { on_event(e); });
  control_->start();
  // Container-aware probes follow containers from now on, through the pod watch started
  // above (and waited for): those already running are attached before readiness.
  probes_->set_pod_names(pod_names_);
  // Waiting probes attach when their file appears, replaced files are followed: a stat per
  // probe every second (inotify would miss files whose directory does not exist yet, and
  // library names resolve through the linker cache, not a directory).
  refresher_ = std::jthread([this](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, stop, std::chrono::seconds(1), [&] { return stop.stop_requested(); }))
      probes_->refresh();
  });
}

void Runtime::apply_broker_policy(const PolicyUpdate& p) {
  const std::string what = p.trace_id_prefix.empty() ? "" : " trace_id_prefix " + p.trace_id_prefix;
  if (p.removed) {
    const int n = control_->remove_policy(p.service, p.probe, p.trace_id_prefix);
    spdlog::info("broker policy for service '{}' probe '{}'{} removed -> {} probe(s) back", p.service, p.probe, what, n);
    return;
  }
  ProbePolicy rule{p.service, p.probe, p.sampling_rate, p.target_qps,
                   [this, p](const loader::ProbeInfo& probe) {
                     const auto meta = probes_->meta(probe.id);
                     return policy_applies(p, probe, meta.get(), spec_.policy_service);
                   },
                   p.trace_id_prefix};
  const int n = control_->apply_policy(std::move(rule));
  spdlog::info("broker policy for service '{}' probe '{}'{}: rate {} target {} -> {} probe(s)", p.service, p.probe,
               what, p.sampling_rate, p.target_qps, n);
}

void Runtime::report_refusals() {
  if (!forwarder_) return;
  std::vector<PolicyRefusal> out;
  for (const auto& [key, probes] : control_->prefix_refusals())
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), {probes.begin(), probes.end()},
                   "no trace-id argument"});
  forwarder_->set_policy_refusals(std::move(out));
}

void Runtime::on_event(Event& e) {
  // A windowed probe's kernel kept p / f of the calls inside windows covering f of the time:
  // the event's threshold (and so its weight) is that of p. Between windows (a probe sampling
  // calls) the kernel's threshold is p already: the kernel marks which.
  if (const double f = session_->window_fraction(e.probe_id); e.windowed && f < 1)
    e.threshold = std::max<uint64_t>(1, probability_to_threshold(threshold_to_probability(e.threshold) * f));
  if (!chain_.enrich(e)) return;
  if (spec_.summary && e.kind == EventKind::kCuda && e.cuda.launch && !e.cuda.kernel.empty()) {
    auto& k = kernel_launches_[e.cuda.kernel];
    k.launches++;
    k.estimated += e.weight();
    if (e.has_duration) k.durations.push_back(e.duration_ns);
  }
  if (!filter_.keep(spec_.export_filter, e)) return;
  counts_->on_delivered(e);
  if (spec_.summary && e.consistent) {
    if (auto digits = control_->prefix_rule_of(e.probe_id, e.trace_id_hi, e.trace_id_lo); !digits.empty()) {
      auto& d = prefix_delivered_[{e.probe_id, std::move(digits)}];
      d.events++;
      d.weight += e.weight();
    }
  }
  if (spec_.max_events && delivered_ >= spec_.max_events) return;
  for (auto& sink : sinks_) sink->consume(e);
  delivered_++;
}

void Runtime::close_interval() {
  auto out = counts_->close(*session_, [this](uint32_t id) { return service_of(id); });
  if (out.empty()) return;
  for (auto& sink : sinks_) sink->consume_counts(out);
}

std::string Runtime::broker_refusal() const { return forwarder_ ? forwarder_->refused() : std::string(); }

bool Runtime::drain_sinks() {
  const int before = stops();
  const auto give_up = [this, before] { return stops() > before; };
  bool all = true;
  for (auto& sink : sinks_) all = sink->drain(spec_.drain_limit, give_up) && all;
  return all;
}

void Runtime::print_summary(double seconds) const {
  fprintf(stderr, "\nmcp-agent: summary after %.1f s\n", seconds);
  fprintf(stderr, "%-48s %12s %12s %10s %12s %10s %12s %14s\n", "PROBE", "SEEN", "KEPT", "LOST", "QUOTA_DROP",
          "ORPHANED", "DELIVERED", "EST_COUNT");
  for (const auto& p : session_->probes()) {
    if (p.internal) continue;
    const auto c = session_->counters(p.id);
    const std::string est =
        estimable(*session_, p.id) ? fmt::format("{:.0f}", counts_->estimates().estimate(p.id)) : std::string("-");
    fprintf(stderr, "%-48s %12llu %12llu %10llu %12llu %10llu %12llu %14s\n", p.name.c_str(),
            (unsigned long long)c.seen, (unsigned long long)c.kept, (unsigned long long)c.lost,
            (unsigned long long)c.quota_dropped, (unsigned long long)c.orphaned,
            (unsigned long long)counts_->delivered(p.id), est.c_str());
    if (c.lost)
      fprintf(stderr, "mcp-agent: warning: %s lost %llu events (ring buffer full; raise %s)\n", p.name.c_str(),
              (unsigned long long)c.lost, setting_name(Setting::kRingbufSize).c_str());
  }
  if (consumer_->malformed())
    fprintf(stderr, "mcp-agent: warning: %llu malformed records skipped\n", (unsigned long long)consumer_->malformed());
  print_return_mode(*session_);
  print_windows(*session_, *counts_);
  if (spec_.control.quotas) print_tenants(*session_, *spec_.control.quotas);
  print_prefix_rules();
  print_kernels(kernel_launches_);
}

// Each trace-id prefix rule's share of its probe: the calls under the prefix, those kept, and
// an estimate of the calls that survives quota and loss, as the probe's EST_COUNT does.
void Runtime::print_prefix_rules() const {
  const auto rules = control_->prefix_rules();
  if (rules.empty()) return;
  fprintf(stderr, "%-48s %10s %12s %12s %12s %12s %14s\n", "TRACE-ID PREFIX (probe)", "RATE", "SEEN", "KEPT",
          "QUOTA_DROP", "DELIVERED", "EST_COUNT");
  for (const auto& r : rules) {
    const auto it = prefix_delivered_.find({r.probe_id, r.prefix});
    const PrefixDelivered d = it == prefix_delivered_.end() ? PrefixDelivered{} : it->second;
    const double sampled_in = static_cast<double>(r.counters.kept + r.counters.quota_dropped);
    const double estimate = d.events ? d.weight * sampled_in / static_cast<double>(d.events) : 0;
    const size_t width = r.prefix.size() < 28 ? 44 - r.prefix.size() : 16;
    const std::string name = r.prefix + "… (" + output::short_probe_name(session_->probe_name(r.probe_id), width) + ")";
    const std::string rate = r.target_qps > 0 ? fmt::format("{:g}/s", r.target_qps) : fmt::format("{:g}", r.sampling_rate);
    fprintf(stderr, "%-48s %10s %12llu %12llu %12llu %12llu %14.0f\n", name.c_str(), rate.c_str(),
            (unsigned long long)r.counters.seen, (unsigned long long)r.counters.kept,
            (unsigned long long)r.counters.quota_dropped, (unsigned long long)d.events, estimate);
  }
}

int Runtime::run(const RunHooks& hooks) {
  announce_ready(hooks.ready_probes ? hooks.ready_probes() : attached_probes(*session_), spec_.ready_file);
  const auto start = std::chrono::steady_clock::now();
  auto next_interval = start + std::chrono::seconds(1);
  while (!stop_requested()) {
    consumer_->poll(pipeline::kPollTimeoutMs);
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_interval) {
      close_interval();
      next_interval = now + std::chrono::seconds(1);
    }
    for (auto& sink : sinks_) sink->poll_done();
    probes_->poll_libraries();  // CUDA libraries processes mapped: attached within a poll
    if (refusals_due_.exchange(false)) report_refusals();  // here: forwarder_ is set by now
    if (hooks.each_poll) hooks.each_poll();
    if (spec_.max_events && delivered_ >= spec_.max_events) break;
    if (spec_.duration.count() && now - start >= spec_.duration) break;
    if (hooks.finished && hooks.finished()) break;
  }

  // The one shutdown sequence. Detach first, so nothing is kept after the last drain:
  // then every kept event is delivered, lost or orphaned, and the summary adds up.
  spdlog::info("stopping: flushing events");
  if (hooks.stopping) hooks.stopping();
  refresher_ = {};  // nothing attaches once the probes are detached
  control_->stop();
  session_->detach_all();
  consumer_->drain();
  close_interval();
  const bool drained = drain_sinks();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<SinkReport> reports;
  for (const auto& sink : sinks_) reports.push_back(sink->report());
  if (spec_.summary) {
    print_summary(secs);
    for (const auto& r : reports)
      if (!r.summary.empty()) fprintf(stderr, "%s\n", r.summary.c_str());
    if (audit_)
      fprintf(stderr, "audit: %llu records in %s\n", static_cast<unsigned long long>(audit_->records()),
              audit_->current_file().parent_path().c_str());
  }
  bool failed = false, said = false;
  // A decision without its record is a gap in the trail: said, and the run fails.
  if (audit_ && audit_->failures()) {
    fprintf(stderr, "mcp-agent: audit log: %llu records could not be written to %s\n",
            static_cast<unsigned long long>(audit_->failures()), audit_->current_file().parent_path().c_str());
    failed = true;
  }
  for (const auto& r : reports) {
    if (r.undelivered.empty()) continue;
    fprintf(stderr, "mcp-agent: %s\n", r.undelivered.c_str());
    said = true;
    failed |= r.lost > 0 || (r.kept > 0 && !spec_.kept_on_disk_is_delivered);
  }
  // A refused credential fails the run even with nothing to deliver (the undelivered line says it).
  if (const std::string refusal = broker_refusal(); !refusal.empty()) {
    if (!said) fprintf(stderr, "mcp-agent: %s\n", refusal.c_str());
    said = true;
    failed = true;
  }
  if (!drained && !said) {
    fprintf(stderr, "mcp-agent: the sinks did not deliver every event in time\n");
    failed = true;
  }
  return failed ? 1 : 0;
}

void Runtime::register_metrics(metrics::Registry& reg) {
  auto& session = *session_;
  auto& control = *control_;
  auto& clock = *clock_;
  const ProbeSet& probes = *probes_;
  Forwarder* forwarder = forwarder_;
  reg.add_collector(metrics::kProbeState, [&probes] {
    std::vector<metrics::Sample> out;
    for (const auto& p : probes.status())
      for (ProbeState s : {ProbeState::kWaiting, ProbeState::kAttached, ProbeState::kFailed})
        out.push_back({{p.probe, state_name(s)}, p.state == s ? 1.0 : 0.0});
    return out;
  });
  reg.add_collector(metrics::kProbeReattach, [&probes] {
    std::vector<metrics::Sample> out;
    for (const auto& p : probes.status()) out.push_back({{p.probe}, static_cast<double>(p.reattaches)});
    return out;
  });
  auto per_probe = [&session](int counter) {
    return [&session, counter] {
      std::vector<metrics::Sample> out;
      for (const auto& p : session.probes()) {
        if (p.internal) continue;
        const auto c = session.counters(p.id);
        const uint64_t v = counter == 0 ? c.seen : counter == 1 ? c.kept : c.lost;
        out.push_back({{p.name}, static_cast<double>(v)});
      }
      return out;
    };
  };
  reg.add_collector(metrics::kEventsSeen, per_probe(0));
  reg.add_collector(metrics::kEventsKept, per_probe(1));
  reg.add_collector(metrics::kEventsLost, per_probe(2));
  reg.add_collector(metrics::kQuotaDrops, [&session] {
    std::vector<metrics::Sample> out;
    for (uint32_t b = 0; b < control::kTenantBuckets; b++) {
      const auto c = session.tenant_counters(b);
      if (c.seen) out.push_back({{std::to_string(b)}, static_cast<double>(c.quota_dropped)});
    }
    return out;
  });
  reg.add_callback(metrics::kRingbufCapacity, [&session] { return static_cast<double>(session.ringbuf_bytes()); });
  reg.add_callback(metrics::kUprobeSessions, [&session] { return session.uprobe_sessions() ? 1.0 : 0.0; });
  reg.add_callback(metrics::kBpfMapFailures, [&session] { return static_cast<double>(session.map_failures()); });
  reg.add_collector(metrics::kKernelFeature, [] {
    std::vector<metrics::Sample> out;
    for (const auto& f : loader::KernelFeatures::get().list()) out.push_back({{f.name, f.since}, f.present ? 1.0 : 0.0});
    return out;
  });
  reg.add_callback(metrics::kRingbufOccupancy, [&session] { return static_cast<double>(session.ringbuf_pending_bytes()); });
  reg.add_collector(metrics::kSamplingProbability, [&session] {
    std::vector<metrics::Sample> out;
    for (const auto& p : session.probes())
      if (!p.internal) out.push_back({{p.name}, threshold_to_probability(session.threshold(p.id))});
    return out;
  });
  // Probes sampled in time windows: how many opened, what share of the time they covered.
  auto window_samples = [&session](bool coverage) {
    std::vector<metrics::Sample> out;
    for (const auto& p : session.probes())
      if (const auto w = session.window_stats(p.id); w && !p.internal)
        out.push_back({{p.name}, coverage ? w->covered() : static_cast<double>(w->windows)});
    return out;
  };
  reg.add_collector(metrics::kSamplingWindows, [window_samples] { return window_samples(false); });
  reg.add_collector(metrics::kWindowCoverage, [window_samples] { return window_samples(true); });
  reg.add_collector(metrics::kEstimateMode, [&session] {
    std::vector<metrics::Sample> out;
    for (const auto& p : session.probes()) {
      const auto t = p.internal ? std::nullopt : session.estimate_tracker(p.id);
      if (!t) continue;
      for (auto m : {loader::EstimateMode::kCalls, loader::EstimateMode::kWindows, loader::EstimateMode::kUnestimable})
        out.push_back({{p.name, loader::estimate_mode_name(m)}, t->mode() == m ? 1.0 : 0.0});
    }
    return out;
  });
  reg.add_collector(metrics::kProbeRate, [&session, &control] {
    std::vector<metrics::Sample> out;
    for (const auto& s : control.rate_stats()) out.push_back({{std::string(session.probe_name(s.probe_id))}, s.kept_qps});
    return out;
  });
  reg.add_callback(metrics::kQueueDepth, [forwarder] { return forwarder ? static_cast<double>(forwarder->stats().queued) : 0.0; });
  reg.add_callback(metrics::kSpoolBytes, [forwarder] { return forwarder ? static_cast<double>(forwarder->stats().spooled_bytes) : 0.0; });
  reg.add_callback(metrics::kForwardErrors, [forwarder] { return forwarder ? static_cast<double>(forwarder->stats().forward_errors) : 0.0; });
  reg.add_callback(metrics::kForwardDropped, [forwarder] { return forwarder ? static_cast<double>(forwarder->stats().dropped_oldest) : 0.0; });
  reg.add_callback(metrics::kForwardUnreadable, [forwarder] { return forwarder ? static_cast<double>(forwarder->stats().unreadable_batches) : 0.0; });
  auto* log = audit_.get();  // 0 without an audit log, so every series always exists
  reg.add_callback(metrics::kAuditRecords, [log] { return log ? static_cast<double>(log->records()) : 0.0; });
  reg.add_callback(metrics::kAuditFailures, [log] { return log ? static_cast<double>(log->failures()) : 0.0; });
  reg.add_callback(metrics::kClockDrift, [&clock] { return clock.stats().calibrator.drift_ppm; });
  reg.add_callback(metrics::kClockResidual, [&clock] { return clock.stats().calibrator.residual_ns / 1e9; });
}

}  // namespace mcp::runtime
