#include "daemon/run_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "clock/timestamper.h"
#include "common/error.h"
#include "config/loader.h"
#include "control/tenant_quota.h"
#include "cuda/kernel_symbolizer.h"
#include "daemon/probe_set.h"
#include "forward/agent_id.h"
#include "forward/forwarder.h"
#include "loader/bpf_session.h"
#include "metrics/names.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "output/stream_sink.h"
#include "pipeline/ring_consumer.h"
#include "privilege/privilege.h"
#include "reload/config_store.h"
#include "reload/reloader.h"
#include "reload/watcher.h"
#include "mcp_abi.h"
#include "runtime/control_loop.h"
#include "runtime/export_filter.h"
#include "runtime/interval_counts.h"
#include "runtime/readiness.h"

namespace mcp::daemon {
namespace {

// SIGTERM/SIGINT received: the first stops the agent, a later one ends the wait for the broker.
std::atomic<int> g_signals{0};
void on_stop(int) { g_signals.fetch_add(1); }

// The agent id: node_name or $NODE_NAME when given (unique per cluster), else the id kept in the
// state directory (stable across restarts, so the broker dedups spool replays), else one per run.
std::string agent_id_for(const config::Config& cfg, const char* state_dir) {
  if (!cfg.node_name.empty()) return cfg.node_name;
  if (const char* node = getenv("NODE_NAME"); node && *node) return node;
  if (state_dir && *state_dir) return stable_agent_id(state_dir);
  return unique_agent_id();
}

struct RunFlags {
  std::string config;
  std::string ready_file;
  bool verbose = false;
};

runtime::ExportFilterSpec export_spec(const config::Config& cfg) {
  return {cfg.compliance.rules, cfg.exporter.error_only, cfg.exporter.sample_rate};
}

std::optional<control::TenantQuotaTable> quota_table(const config::QuotaConfig& q) {
  if (!q.default_quota && q.tenants.empty()) return std::nullopt;
  std::vector<control::TenantQuotaSpec> specs;
  for (const auto& t : q.tenants)
    specs.push_back({t.cgroup_path, {t.rate, static_cast<uint64_t>(std::max(1.0, t.burst))}});
  control::Quota def{0, 0};  // burst 0: unlimited
  if (q.default_quota) def = {q.default_quota->rate, static_cast<uint64_t>(std::max(1.0, q.default_quota->burst))};
  return control::build_tenant_quota_table(specs, def, control::find_cgroup2_mount());
}

void register_metrics(metrics::Registry& reg, loader::BpfSession& session, runtime::ControlLoop& control,
                      clock::Timestamper& clock, Forwarder* forwarder, reload::Reloader& reloader,
                      const ProbeSet& probes) {
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
  reg.add_callback(metrics::kRingbufOccupancy, [&session] { return static_cast<double>(session.ringbuf_pending_bytes()); });
  reg.add_collector(metrics::kSamplingProbability, [&session] {
    std::vector<metrics::Sample> out;
    for (const auto& p : session.probes())
      if (!p.internal) out.push_back({{p.name}, threshold_to_probability(session.threshold(p.id))});
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
  reg.add_callback(metrics::kReloads, [&reloader] { return static_cast<double>(reloader.stats().successes); });
  reg.add_callback(metrics::kReloadFailures, [&reloader] { return static_cast<double>(reloader.stats().failures); });
  reg.add_callback(metrics::kClockDrift, [&clock] { return clock.stats().calibrator.drift_ppm; });
  reg.add_callback(metrics::kClockResidual, [&clock] { return clock.stats().calibrator.residual_ns / 1e9; });
}

int run_daemon(const RunFlags& flags) {
  spdlog::set_level(flags.verbose ? spdlog::level::debug : spdlog::level::info);
  // Fail fast, with the file's own diagnostics, before touching the kernel.
  const auto initial = std::make_shared<const config::Config>(config::load_config(flags.config));

  loader::SessionOptions so;
  so.quotas = true;  // a reload may add quotas; unlimited buckets cost one lookup
  so.cuda_slow_ns = static_cast<uint64_t>(initial->cuda.slow_launch.count());
  auto session = loader::BpfSession::open(so);

  runtime::ControlSettings cs;
  cs.accept_policies = true;
  runtime::ControlLoop control(*session, cs);
  cuda::KernelSymbolizer symbolizer;
  ProbeSet probes(*session, control, symbolizer);

  reload::ConfigStore store;
  auto apply = [&](const reload::ConfigSnapshot& before, const reload::ConfigSnapshot& after,
                   const reload::ConfigDiff& d) {
    // Everything that can fail comes first; probes.apply() is all or nothing.
    std::optional<std::optional<control::TenantQuotaTable>> quotas;
    if (!before || d.quotas_changed) quotas = quota_table(after->quotas);
    probes.apply(d);
    if (quotas) control.set_quotas(std::move(*quotas));
    if (!before || d.services_changed || d.probes_changed()) probes.apply_services(*after);
    if (before && (d.broker_changed || d.metrics_changed || d.cuda_settings_changed))
      spdlog::warn("broker, metrics and CUDA slow-launch settings take effect on restart");
    spdlog::info("configuration applied: {} added, {} removed, {} retuned, {} probes attached", d.added.size(),
                 d.removed.size(), d.sampling_changed.size() + d.metadata_changed.size(), probes.size());
  };
  reload::Reloader reloader(flags.config, store, apply);
  reloader.load_initial();
  const auto cfg0 = store.current();

  // Everything is attached: keep only what the agent still needs, before any thread starts.
  try {
    const auto dropped = privilege::drop_to(privilege::runtime_capabilities(privilege::running_kernel()));
    if (!dropped.missing.empty()) spdlog::warn("capabilities not held: {}", privilege::capability_list(dropped.missing));
  } catch (const Error& e) {
    spdlog::warn("keeping full privileges: {}", e.what());
  }

  clock::Timestamper timestamper;
  timestamper.start();
  std::unique_ptr<Forwarder> forwarder;
  std::string forwarder_id;
  std::unique_ptr<output::StreamSink> printer;
  if (!cfg0->broker.addresses.empty()) {
    ForwarderOptions fo;
    fo.brokers = cfg0->broker.addresses;
    const char* state_dir = getenv("STATE_DIRECTORY");
    fo.agent_id = agent_id_for(*cfg0, state_dir);
    fo.token_file = cfg0->broker.token_file;
    fo.compression = parse_compression(cfg0->broker.compression);
    if (cfg0->broker.tls) fo.tls = {cfg0->broker.tls->ca, cfg0->broker.tls->cert, cfg0->broker.tls->key};
    fo.spool_dir = state_dir && *state_dir ? std::string(state_dir) + "/spool" : "";
    fo.on_policy = [&](const PolicyUpdate& p) {
      const int n = control.apply_policy(p.probe, p.sampling_rate, p.target_qps);
      spdlog::info("broker policy service '{}' probe '{}' (rate {}, target {}): {} probe(s)", p.service, p.probe,
                   p.sampling_rate, p.target_qps, n);
    };
    fo.on_broker_hlc = [&timestamper](uint64_t hlc) { timestamper.merge_remote(hlc); };
    forwarder_id = fo.agent_id;
    forwarder = make_forwarder(std::move(fo));
  } else {
    printer = std::make_unique<output::StreamSink>(output::make_formatter("json"), STDOUT_FILENO);
  }
  control.start();

  std::atomic<int64_t> last_poll{std::chrono::steady_clock::now().time_since_epoch().count()};
  metrics::Registry registry;
  register_metrics(registry, *session, control, timestamper, forwarder.get(), reloader, probes);
  metrics::MetricsServer server(registry, [&] {
    const auto idle = std::chrono::steady_clock::now().time_since_epoch().count() - last_poll.load();
    if (idle > std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::seconds(5)).count())
      return metrics::HealthStatus{false, "event consumer stalled"};
    // Healthy with waiting or failed probes (one node of a fleet may lack a binary); say which.
    std::string detail;
    for (const auto& p : probes.status())
      if (p.state != ProbeState::kAttached) detail += "probe " + p.probe + " " + state_name(p.state) + ": " + p.detail + "\n";
    return metrics::HealthStatus{true, detail};
  }, metrics::parse_listen_address(cfg0->metrics_listen));
  server.start();

  // Waiting probes attach when their file appears, replaced files are followed: a stat per
  // probe every second (inotify would miss files whose directory does not exist yet, and
  // library names resolve through the linker cache, not a directory).
  std::mutex refresh_mu;
  std::condition_variable_any refresh_cv;
  std::jthread refresher([&](std::stop_token stop) {
    std::unique_lock lock(refresh_mu);
    while (!refresh_cv.wait_for(lock, stop, std::chrono::seconds(1), [&] { return stop.stop_requested(); }))
      probes.refresh();
  });

  reload::ConfigWatcher watcher(flags.config, [&](reload::Trigger t) { reloader.on_trigger(t); });
  reload::install_sighup_trigger(watcher);
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  spdlog::info("mcp-agent running: {} probes, metrics on {}:{}, {}", probes.size(),
               cfg0->metrics_listen.substr(0, cfg0->metrics_listen.rfind(':')), server.port(),
               forwarder ? "forwarding to " + cfg0->broker.addresses.front() + " as agent " + forwarder_id
                         : std::string("events to stdout"));

  runtime::ExportFilter filter;
  runtime::IntervalCounts counts(MCP_MAX_PROBES);  // the ProbeCounts shipped beside the events
  const auto close_interval = [&] {
    auto out = counts.close(*session, [&](uint32_t id) {
      const auto meta = probes.meta(id);
      return meta ? meta->service : std::string();
    });
    if (forwarder && !out.empty()) forwarder->consume_counts(out);
  };
  reload::ConfigSnapshot cfg = store.current();
  runtime::ExportFilterSpec spec = export_spec(*cfg);
  pipeline::RingConsumer consumer(
      session->ringbuf_fd(),
      [&](uint32_t id) { return pipeline::ProbeRef{session->probe_name(id), session->probe_nargs(id)}; },
      [&](Event& e) {
        const auto meta = probes.meta(e.probe_id);
        if (e.kind == EventKind::kCuda) {
          if (meta) e.cuda.api = meta->cuda_api;
          if (!symbolizer.process(e)) return;
        }
        if (meta) {
          e.service = meta->service;
          e.tags = meta->tags;
        }
        timestamper.stamp(e);
        if (!filter.keep(spec, e)) return;
        counts.on_delivered(e);
        if (forwarder) forwarder->consume(e);
        else printer->consume(e);
      });
  runtime::announce_ready(probes.size(), flags.ready_file);
  auto next_interval = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (g_signals.load() == 0) {
    if (auto now_cfg = store.current(); now_cfg != cfg) {  // one snapshot per batch: a reload never splits an event
      cfg = std::move(now_cfg);
      spec = export_spec(*cfg);
    }
    consumer.poll(pipeline::kPollTimeoutMs);
    if (const auto now = std::chrono::steady_clock::now(); now >= next_interval) {
      close_interval();
      next_interval = now + std::chrono::seconds(1);
    }
    if (printer) printer->flush();
    last_poll.store(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  spdlog::info("stopping: flushing events");
  refresher.request_stop();
  refresher.join();
  reload::remove_sighup_trigger();
  control.stop();
  consumer.drain();
  close_interval();
  if (printer) printer->flush();
  int rc = 0;
  if (forwarder) {
    // The documented 10 s, once (the destructor does not wait again); a second signal ends it.
    const int signals = g_signals.load();
    forwarder->drain(std::chrono::seconds(10), [signals] { return g_signals.load() > signals; });
    const Undelivered u = undelivered_of(forwarder->stats());
    if (u.any()) spdlog::warn("{}", u.describe());
    // Events in the on-disk spool are sent after a restart; events gone are a failure.
    if (u.lost || (u.pending && u.spool_dir.empty())) rc = 1;
  }
  server.stop();
  return rc;
}

}  // namespace

void add_run_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<RunFlags>();
  auto* sub = app.add_subcommand("run", "Run the node agent from a configuration file (hot-reloaded)");
  sub->add_option("--config,-c", flags->config, "agent.yaml (a ConfigMap mount works)")->required();
  sub->add_option("--ready-file", flags->ready_file, "Write the readiness line to this file once probes are attached");
  sub->add_flag("--verbose,-v", flags->verbose, "Debug logging");
  sub->callback([flags, &action] { action = [flags] { return run_daemon(*flags); }; });
}

}  // namespace mcp::daemon
