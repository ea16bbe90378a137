#include "commands/run.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>

#include "audit/audit_log.h"
#include "common/error.h"
#include "common/setting_names.h"
#include "config/parse_config.h"
#include "control/tenant_quota.h"
#include "forward/forwarder.h"
#include "loader/kernel_features.h"
#include "metrics/names.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "privilege/privilege.h"
#include "reload/config_store.h"
#include "reload/reloader.h"
#include "reload/watcher.h"
#include "runtime/config_spec.h"
#include "runtime/probe_set.h"
#include "runtime/runtime.h"

namespace mcp::commands {
namespace {

// agent.yaml's key for a setting lower layers name (common/setting_names.h).
std::string config_key_for(Setting s) {
  switch (s) {
    case Setting::kTenantQuota: return "quotas.tenants entry";
    case Setting::kTraceIdArg: return "trace_id";
    case Setting::kTlsClientCert: return "broker.tls.cert and broker.tls.key";
    case Setting::kBrokers: return "broker.addresses";
    case Setting::kPodNames: return "kubernetes.pod_names";
    case Setting::kRingbufSize:  // no agent.yaml key: the words say what to raise
    case Setting::kUprobe: break;
  }
  return setting_words(s);
}

struct RunFlags {
  std::string config;
  std::string ready_file;
  bool verbose = false;
};

using runtime::ProbeSet;
using runtime::ProbeState;

// The daemon's own metrics beside the runtime's: reloads.
void register_reload_metrics(metrics::Registry& reg, reload::Reloader& reloader) {
  reg.add_callback(metrics::kReloads, [&reloader] { return static_cast<double>(reloader.stats().successes); });
  reg.add_callback(metrics::kReloadFailures, [&reloader] { return static_cast<double>(reloader.stats().failures); });
}

// The audit trail's drops beside the runtime's audit metrics (0 without a trail, so the series
// always exists).
void register_audit_metrics(metrics::Registry& reg, const audit::AuditLog* log) {
  reg.add_callback(metrics::kAuditDroppedEvents, [log] { return log ? static_cast<double>(log->dropped_events()) : 0.0; });
}

// The configuration's runtime settings (probes are the ProbeSet's, attached on load).
runtime::RuntimeSpec spec_of(const config::Config& cfg, const RunFlags& flags) {
  runtime::RuntimeSpec spec;
  spec.session.quotas = true;  // a reload may add quotas; unlimited buckets cost one lookup
  spec.session.cuda_slow_ns = static_cast<uint64_t>(cfg.cuda.slow_launch.count());
  spec.control.accept_policies = true;
  spec.export_filter = runtime::export_filter_of(cfg);
  const char* state_dir = getenv("STATE_DIRECTORY");
  // node_name or $NODE_NAME (unique in a cluster), else the state directory's id.
  spec.identity = {cfg.node_name, true, state_dir ? state_dir : ""};
  if (!cfg.broker.addresses.empty()) {
    ForwarderOptions fo = runtime::forwarder_of(cfg.broker);
    fo.spool_dir = state_dir && *state_dir ? std::string(state_dir) + "/spool" : "";
    spec.broker = std::move(fo);
  } else if (!cfg.otlp) {
    spec.stream = runtime::StreamSpec{"json", ""};
  }
  spec.otlp = cfg.otlp;
  spec.audit = runtime::audit_options_of(cfg.compliance);

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
  runtime::Runtime rt(spec_of(*initial, flags));
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

  rt.start();  // container-aware probes follow containers, the probes are refreshed from here
  Forwarder* forwarder = rt.forwarder();

  std::atomic<int64_t> last_poll{std::chrono::steady_clock::now().time_since_epoch().count()};
  metrics::Registry registry;
  rt.register_metrics(registry);
  register_reload_metrics(registry, reloader);
  register_audit_metrics(registry, rt.audit_log());
  metrics::MetricsServer server(registry, [&] {
    const auto idle = std::chrono::steady_clock::now().time_since_epoch().count() - last_poll.load();
    if (idle > std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::seconds(5)).count())
      return metrics::HealthStatus{false, "event consumer stalled"};
    // Events are withheld while their audit records cannot be written: not ok until they can.
    if (const auto* audit = rt.audit_log())
      if (auto problem = audit->health_problem(); !problem.empty()) return metrics::HealthStatus{false, problem};
    // Healthy with waiting or failed probes (one node of a fleet may lack a binary); say which.
    std::string detail;
    for (const auto& p : probes.status())
      if (p.state != ProbeState::kAttached) detail += "probe " + p.probe + " " + runtime::state_name(p.state) + ": " + p.detail + "\n";
    // The broker policies in force, as `mcp-agent policy list` prints the broker's set.
    for (const auto& line : control.policy_lines()) detail += "policy " + line + "\n";
    // What this node's kernel lacks, as `mcp-agent version` lists it.
    for (const auto& line : loader::KernelFeatures::get().off_lines()) detail += "kernel " + line + "\n";
    return metrics::HealthStatus{true, detail};
  }, metrics::parse_listen_address(cfg0->metrics_listen));
  server.start();

  auto watcher = std::make_unique<reload::ConfigWatcher>(flags.config, [&](reload::Trigger t) { reloader.on_trigger(t); });
  reload::install_sighup_trigger(*watcher);
  spdlog::info("mcp-agent running: {} probes, metrics on {}:{}, {}", probes.size(),
               cfg0->metrics_listen.substr(0, cfg0->metrics_listen.rfind(':')), server.port(),
               forwarder ? "forwarding to " + cfg0->broker.addresses.front() + " as agent " + rt.agent_id()
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
  sub->callback([flags, &action] {
    use_setting_spelling(config_key_for);
    action = [flags] { return run_daemon(*flags); };
  });
}

}  // namespace mcp::commands
