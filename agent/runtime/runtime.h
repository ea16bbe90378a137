// Runtime: the agent's one data path, shared by every front end (`trace` builds a
// RuntimeSpec from flags, `run` from agent.yaml; nothing here knows which one runs).
//
// It owns the BPF session, the control loop, the probes (ProbeSet: every front end's probes
// are configured ones; the runtime follows their files every second and attaches the CUDA
// libraries processes map after each poll), the CUDA kernel symboliser, the clock, the ring
// consumer, the enrichment chain, the export filter, the interval counts, the agent's
// identity, every sink and the stop token (SIGINT/SIGTERM or request_stop()). Each kept
// event goes, on the consumer thread:
//   window weight -> enrichment chain (enrich/enrich_chain.h: pod identity -> probe labels
//   -> CUDA symbols -> clock -> pod names) -> export filter -> interval counts -> max_events
//   -> every sink (fan-out).
// Life: construct (opens the session, builds the control loop stopped, resolves the agent
// id); the front end applies its probes (probes().apply()) and drops privileges; start()
// starts the clock, builds and starts the sinks (so their threads hold no more than the
// rest), the pod watch (container-aware probes follow it), the consumer, the control loop and
// the probes' refresh; run() announces readiness, polls until stopped, then runs the one
// shutdown sequence:
//   hooks.stopping() (the front end stops whatever reloads) -> the probes' refresh stops
//   -> control loop stops
//   -> every probe detached (nothing new is kept) -> ring drained -> last interval counts
//   -> sinks drained (bounded; a second signal ends the wait) -> summary (spec.summary)
//   -> undelivered events reported, one line each -> exit code.
// Adding a sink: one EventSink class (common/sink.h), one optional field in RuntimeSpec
// naming its settings, one line in Runtime::start() building it.
// Adding an enrichment stage: one Enricher (enrich/stages.h), one line in start().
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/event.h"
#include "common/sink.h"
#include "forward/forwarder.h"
#include "k8s/pod_names.h"
#include "loader/bpf_session.h"
#include "otlp/exporter_options.h"
#include "audit/audit_log.h"
#include "enrich/enrich_chain.h"
#include "runtime/control_loop.h"
#include "runtime/export_filter.h"

namespace mcp::clock {
class Timestamper;
}
namespace mcp::cuda {
class KernelSymbolizer;
}
namespace mcp::symbolize {
class StackSymbolizer;
}
namespace mcp::pipeline {
class RingConsumer;
}
namespace mcp::metrics {
class Registry;
}

namespace mcp::runtime {

class IntervalCounts;
class ProbeSet;

// Formatted events to a file descriptor.
struct StreamSpec {
  std::string format = "json";  // output::make_formatter's names
  std::string path;             // empty: stdout; else created/truncated
};

// How the agent names itself to the broker and in OTLP resources, resolved once when a broker
// or OTLP sink is configured: `id` as given; else $NODE_NAME when `node_name_env` (unique in a
// cluster; refused when it cannot be an id); else the id kept in `state_dir` (stable across
// runs, so the broker deduplicates a later run's spool replays); else one for this run only
// (two runs on one host must not deduplicate each other's batches).
struct IdentitySpec {
  std::string id;
  bool node_name_env = false;
  std::string state_dir;
};

struct RuntimeSpec {
  loader::SessionOptions session;
  ControlSettings control;
  pid_t uprobe_pid = -1;  // uprobes fire in this process only (`trace --no-follow`); -1: in every one
  // Broker policies for other services are ignored when set (empty: only those for every service).
  std::optional<std::string> policy_service;
  ExportFilterSpec export_filter;  // replaceable while running: set_export_filter()
  // Sinks: each one set adds a sink to the fan-out.
  std::optional<StreamSpec> stream;
  std::optional<ForwarderOptions> broker;  // agent_id, on_policy and on_broker_hlc are the runtime's
  std::optional<otlp::ExporterOptions> otlp;  // resource: the agent id and this host's name
  IdentitySpec identity;
  // The compliance audit trail (audit/audit_log.h); its records name this agent (agent id, else
  // the host name).
  std::optional<audit::AuditOptions> audit;
  std::vector<std::shared_ptr<EventSink>> sinks;  // built by the caller (tests, embedders), after the above
  // Pod names from the API server (k8s/pod_names.h); start() waits up to pod_names_sync for
  // the first list, so the first events of pods already running carry names.
  std::optional<k8s::PodNamesSpec> pod_names;
  std::chrono::milliseconds pod_names_sync{3000};
  // Run limits
  uint64_t max_events = 0;                  // stop after this many events reached the sinks (0: no limit)
  std::chrono::nanoseconds duration{0};     // stop after this long (0: no limit)
  std::string ready_file;                   // the readiness line is written there too
  std::chrono::milliseconds drain_limit{10000};  // the shutdown wait for the sinks
  bool summary = false;                     // print per-probe counts etc. on stderr at the end
  // Events a sink kept on disk for a later run are not a failure of this one (exit 0).
  bool kept_on_disk_is_delivered = false;
};

struct RunHooks {
  std::function<size_t()> ready_probes;  // the count in the readiness line; default: attached probes
  std::function<void()> each_poll;       // on the run thread after each poll (reload snapshots, liveness)
  std::function<bool()> finished;        // true ends the run as a stop request does (traced tree gone)
  std::function<void()> stopping;        // first step of shutdown: stop what attaches probes
};

class Runtime {
 public:
  // One kernel's row of the CUDA summary: launches, and the latencies of those timed.
  struct KernelLaunches {
    size_t launches = 0;     // kept
    double estimated = 0;    // their weights' sum: the launches made
    std::vector<uint64_t> durations;
  };
  // Installs the signal handlers and opens the BPF session; throws mcp::Error.
  explicit Runtime(RuntimeSpec spec);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // SIGINT/SIGTERM set the stop token (the first ends the run, a later one the drain);
  // SIGPIPE is ignored. Idempotent; front ends that fork before the runtime call it first.
  static void install_signal_handlers();

  loader::BpfSession& session() { return *session_; }
  ControlLoop& control() { return *control_; }
  cuda::KernelSymbolizer& symbolizer() { return *symbolizer_; }
  // Why the broker refuses this agent's credential (ForwarderStats::refused), empty while it
  // does not or there is no broker: a one-shot trace ends on it, the daemon keeps retrying.
  std::string broker_refusal() const;
  // The probes, and the labels each event gets from them: apply() before start() (and on
  // reload); the runtime refreshes them from start() until the shutdown.
  ProbeSet& probes() { return *probes_; }

  // Starts the clock, the sinks (opens the output file, connects the forwarder, starts the
  // OTLP exporter), the consumer and the control loop. Throws mcp::Error.
  void start();
  // The id the broker and OTLP resources know this agent by (IdentitySpec); empty when
  // neither sink is configured.
  const std::string& agent_id() const { return agent_id_; }
  // The agent's self-metrics (metrics/names.h: probes, sampling, tenants, ring buffer,
  // forwarder, clock) into `registry`, read live; after start(). The registry must not
  // outlive the runtime.
  void register_metrics(metrics::Registry& registry);
  // The broker sink's forwarder (metrics read its stats); null without one. After start().
  Forwarder* forwarder() const { return forwarder_; }
  // The compliance audit trail (its health and drops for /healthz and metrics); null without one.
  const audit::AuditLog* audit_log() const { return audit_.get(); }
  // Run thread only (e.g. from hooks.each_poll): the export filter for the next events.
  void set_export_filter(ExportFilterSpec spec) { spec_.export_filter = std::move(spec); }

  // Readiness, the poll loop and the shutdown sequence (see above); returns the exit code:
  // 1 when events were lost or did not arrive in time, else 0.
  int run(const RunHooks& hooks = {});
  // Ends run() as SIGTERM does; thread-safe.
  void request_stop();
  bool stop_requested() const;

 private:
  // A policy the broker pushed (or its removal), on the forwarder's receiving thread.
  void apply_broker_policy(const PolicyUpdate& p);
  void on_event(Event& e);
  void close_interval();
  bool drain_sinks();
  void print_summary(double seconds) const;
  std::string service_of(uint32_t probe_id) const;
  int stops() const;  // signals received plus request_stop() calls

  RuntimeSpec spec_;
  std::unique_ptr<loader::BpfSession> session_;
  std::unique_ptr<ControlLoop> control_;
  std::unique_ptr<cuda::KernelSymbolizer> symbolizer_;
  std::unique_ptr<symbolize::StackSymbolizer> stacks_;
  std::unique_ptr<clock::Timestamper> clock_;
  std::unique_ptr<ProbeSet> probes_;  // before the consumer: it reads their labels
  std::jthread refresher_;             // probes_->refresh() every second, from start()
  enrich::EnrichChain chain_;
  ExportFilter filter_;
  std::unique_ptr<IntervalCounts> counts_;
  std::vector<std::shared_ptr<EventSink>> sinks_;
  Forwarder* forwarder_ = nullptr;  // owned by sinks_
  std::atomic<bool> refusals_due_{false};  // a policy came: report_refusals() on the run thread
  const k8s::PodNames* pod_names_ = nullptr;  // owned by chain_
  std::string agent_id_;
  std::unique_ptr<audit::AuditLog> audit_;  // before the consumer: its filter writes here
  std::unique_ptr<pipeline::RingConsumer> consumer_;
  std::atomic<int> requests_{0};
  uint64_t delivered_ = 0;
  void print_prefix_rules() const;
  // Tells the broker which of its policies some probes refused (PolicyStatus).
  void report_refusals();
  std::map<std::string, KernelLaunches> kernel_launches_;  // CUDA summary (spec.summary)
  struct PrefixDelivered {
    uint64_t events = 0;
    double weight = 0;
  };
  // Delivered events per trace-id prefix rule that decided them, (probe id, digits): the summary.
  std::map<std::pair<uint32_t, std::string>, PrefixDelivered> prefix_delivered_;
};

}  // namespace mcp::runtime
