#include "daemon/run_command.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>

#include "common/agent_id_rule.h"
#include "common/error.h"
#include "clock/timestamper.h"
#include "config/loader.h"
#include "control/tenant_quota.h"
#include "forward/agent_id.h"
#include "forward/forwarder.h"
#include "loader/bpf_session.h"
#include "metrics/names.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "otlp/event_sink.h"
#include "privilege/privilege.h"
#include "reload/config_store.h"
#include "reload/reloader.h"
#include "reload/watcher.h"
#include "runtime/config_spec.h"
#include "runtime/probe_set.h"
#include "runtime/runtime.h"

namespace mcp::daemon {
namespace {

// The agent id: node_name or $NODE_NAME when given (unique per cluster), else the id kept in the
// state directory (stable across restarts, so the broker dedups spool replays), else one per run.
std::string agent_id_for(const config::Config& cfg, const char* state_dir) {
  if (!cfg.node_name.empty()) return cfg.node_name;
  if (const char* node = getenv("NODE_NAME"); node && *node) {
    if (const auto why = agent_id_problem(node)) throw usage_error("NODE_NAME '" + std::string(node) + "' cannot be an agent id: " + *why);
    return node;
  }
  if (state_dir && *state_dir) return stable_agent_id(state_dir);
  return unique_agent_id();
}

struct RunFlags {
  std::string config;
  std::string ready_file;
  bool verbose = false;
};

using runtime::ProbeSet;
using runtime::ProbeState;

void register_metrics(metrics::Registry& reg, loader::BpfSession& session, runtime::ControlLoop& control,
                      clock::Timestamper& clock, Forwarder* forwarder, reload::Reloader& reloader,
                      const ProbeSet& probes) {
  reg.add_collector(metrics::kProbeState, [&probes] {
    std::vector<metrics::Sample> out;
    for (const auto& p : probes.status())
      for (ProbeState s : {ProbeState::kWaiting, ProbeState::kAttached, ProbeState::kFailed})
        out.push_back({{p.probe, runtime::state_name(s)}, p.state == s ? 1.0 : 0.0});
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

// The configuration's runtime settings (probes are the ProbeSet's, attached on load).
runtime::RuntimeSpec spec_of(const config::Config& cfg, const RunFlags& flags) {
  runtime::RuntimeSpec spec;
  spec.session.quotas = true;  // a reload may add quotas; unlimited buckets cost one lookup
  spec.session.cuda_slow_ns = static_cast<uint64_t>(cfg.cuda.slow_launch.count());
  spec.control.accept_policies = true;
  spec.export_filter = runtime::export_filter_of(cfg);
  const char* state_dir = getenv("STATE_DIRECTORY");
  if (!cfg.broker.addresses.empty()) {
    ForwarderOptions fo = runtime::forwarder_of(cfg.broker);
    fo.agent_id = agent_id_for(cfg, state_dir);
    fo.spool_dir = state_dir && *state_dir ? std::string(state_dir) + "/spool" : "";
    spec.broker = std::move(fo);
  } else if (!cfg.otlp) {
    spec.stream = runtime::StreamSpec{"json", ""};
  }

  spec.ready_file = !flags.ready_file.empty() ? flags.ready_file : cfg.ready_file;  // the flag wins
  spec.pod_names = runtime::pod_names_of(cfg);
  // Events in the on-disk spool are sent after a restart; events gone are a failure.
  spec.kept_on_disk_is_delivered = true;
  return spec;
}

int run_daemon(const RunFlags& flags) {
  spdlog::set_level(flags.verbose ? spdlog::level::debug : spdlog::level::info);
  // Fail fast, with the file's own diagnostics, before touching the kernel.
  const auto initial = std::make_shared<const config::Config>(config::load_config(flags.config));

  // Broker settings take effect on restart: the first load's are the run's.
  auto spec = spec_of(*initial, flags);
  const std::string agent_id = spec.broker ? spec.broker->agent_id
                               : initial->otlp ? agent_id_for(*initial, getenv("STATE_DIRECTORY")) : "";
  runtime::Runtime rt(std::move(spec));
  auto& control = rt.control();
  ProbeSet& probes = rt.probes();

  reload::ConfigStore store;
  auto apply = [&](const reload::ConfigSnapshot& before, const reload::ConfigSnapshot& after,
                   const reload::ConfigDiff& d) {
    // Everything that can fail comes first; probes.apply() is all or nothing.
    std::optional<std::optional<control::TenantQuotaTable>> quotas;
    if (!before || d.quotas_changed) quotas = runtime::quota_table(after->quotas);
    probes.apply(d);
    if (quotas) control.set_quotas(std::move(*quotas));
    if (!before || d.services_changed || d.probes_changed()) probes.apply_services(*after);
    if (before && (d.broker_changed || d.otlp_changed || d.metrics_changed || d.cuda_settings_changed ||
                   d.kubernetes_changed))
      spdlog::warn("broker, exporter.otlp, metrics, kubernetes and CUDA slow-launch settings take effect on restart");
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

  // Built after the drop: its exporter's threads hold no more than the rest.
  if (initial->otlp) rt.add_sink(std::make_shared<otlp::OtlpSink>(*initial->otlp, otlp::Origin{agent_id, host_name()}));
  rt.start();  // container-aware probes follow containers, the probes are refreshed from here
  Forwarder* forwarder = rt.forwarder();

  std::atomic<int64_t> last_poll{std::chrono::steady_clock::now().time_since_epoch().count()};
  metrics::Registry registry;
  register_metrics(registry, rt.session(), control, rt.clock(), forwarder, reloader, probes);
  metrics::MetricsServer server(registry, [&] {
    const auto idle = std::chrono::steady_clock::now().time_since_epoch().count() - last_poll.load();
    if (idle > std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::seconds(5)).count())
      return metrics::HealthStatus{false, "event consumer stalled"};
    // Healthy with waiting or failed probes (one node of a fleet may lack a binary); say which.
    std::string detail;
    for (const auto& p : probes.status())
      if (p.state != ProbeState::kAttached) detail += "probe " + p.probe + " " + runtime::state_name(p.state) + ": " + p.detail + "\n";
    return metrics::HealthStatus{true, detail};
  }, metrics::parse_listen_address(cfg0->metrics_listen));
  server.start();

  auto watcher = std::make_unique<reload::ConfigWatcher>(flags.config, [&](reload::Trigger t) { reloader.on_trigger(t); });
  reload::install_sighup_trigger(*watcher);
  spdlog::info("mcp-agent running: {} probes, metrics on {}:{}, {}", probes.size(),
               cfg0->metrics_listen.substr(0, cfg0->metrics_listen.rfind(':')), server.port(),
               forwarder ? "forwarding to " + cfg0->broker.addresses.front() + " as agent " + agent_id
               : cfg0->otlp ? "exporting to the OTLP collector " + cfg0->otlp->endpoint
                            : std::string("events to stdout"));

  reload::ConfigSnapshot cfg = store.current();
  runtime::RunHooks hooks;
  hooks.ready_probes = [&] { return probes.size(); };
  hooks.each_poll = [&] {
    if (auto now_cfg = store.current(); now_cfg != cfg) {  // one snapshot per batch: a reload never splits an event
      cfg = std::move(now_cfg);
      rt.set_export_filter(runtime::export_filter_of(*cfg));
    }
    last_poll.store(std::chrono::steady_clock::now().time_since_epoch().count());
  };
  // Nothing may attach once the runtime detaches: no reload.
  hooks.stopping = [&] {
    reload::remove_sighup_trigger();
    watcher.reset();
  };
  const int rc = rt.run(hooks);
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
