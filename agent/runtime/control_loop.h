// ControlLoop: the agent's steering thread. Every tick (100 ms) it reads the
// kernel's per-CPU counters, runs the per-probe rate controllers (target QPS)
// and writes their thresholds, and re-splits tenant quotas over CPUs by demand.
// It is also the one writer of the cgroup scopes (scope_cgroups, through its ScopeTable):
// tenants, selectors and container-aware probes' containers. A tenant or selector naming
// `pod:`/`namespace:` is resolved through the pod watch's directory (k8s/pod_scope.h) at
// every tick where pods or their cgroups may have changed, so the watch thread never writes
// kernel maps. Without a pod watch such a tenant or selector matches no process, and the
// loop says so once per reference.
// It reaches the kernel only through loader::KernelMaps.
// Owns its thread; stop() (or the destructor) joins it.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/setting_names.h"
#include "control/quota_balancer.h"
#include "control/rate_controller.h"
#include "control/tenant_quota.h"
#include "k8s/pod_scope.h"
#include "loader/kernel_maps.h"
#include "runtime/scope_table.h"

namespace mcp::runtime {

struct ControlSettings {
  std::optional<double> target_qps;                // per probe; none: fixed rate
  bool accept_policies = false;                    // a broker may push rates and targets
  bool probe_targets = false;                      // set_target() per probe (configured probes)
  std::optional<control::TenantQuotaTable> quotas; // none: no tenant quotas
  std::chrono::milliseconds tick{100};
};

// A broker policy as the loop keeps it. (service, probe) is its key, as at the broker: a push
// with the same key replaces it, remove_policy() undoes it. `matches` picks the probes it
// applies to (null: those whose name or symbol is `probe`, every probe when `probe` is empty).
// With a trace_id_prefix the policy is a prefix rule: (service, probe, trace_id_prefix) is its
// key, and it sets, on each matching probe that decides on a trace-id argument, the rate (or the
// controller's target) of the trace ids under the prefix only; the kernel decides from the
// longest rule holding the id, else the probe's own rate (bpf/mcp_abi.h, mcp_prefix_key). A
// matching probe without a trace-id argument rejects it, named in policy_lines().
struct ProbePolicy {
  std::string service, probe;
  double sampling_rate = 0;  // > 0: a fixed rate
  double target_qps = 0;     // > 0 (and no rate): the controller steers to it
  std::function<bool(const loader::ProbeInfo&)> matches;
  std::string trace_id_prefix;  // lowercase hex (common/trace_id_prefix.h); empty: the whole probe
};

// One trace-id prefix rule on one probe, as the summary and the metrics report it.
struct PrefixRuleStats {
  uint32_t probe_id = 0;
  std::string prefix;            // lowercase hex digits
  double sampling_rate = 1;      // of the threshold in force
  double target_qps = 0;         // 0: a fixed rate
  loader::ProbeCounters counters;  // seen, kept, quota_dropped since the rule took the probe
};

class ControlLoop {
 public:
  ControlLoop(loader::KernelMaps& session, ControlSettings settings);
  // A daemon loop: a controller that probes join through set_target(), quotas
  // through set_quotas(); always runs.
  ~ControlLoop();
  // Starts the thread; with a global target, probes attached since construction join first.
  void start();
  void stop();
  // A policy pushed by the broker. A sampling rate fixes a matching probe's rate (the
  // controller lets go of it); a target QPS hands it to the controller. Where policies
  // overlap, the latest pushed wins. Thread-safe; returns how many probes it changed.
  int apply_policy(ProbePolicy policy);
  int apply_policy(const std::string& probe, double sampling_rate, double target_qps) {
    return apply_policy(ProbePolicy{"", probe, sampling_rate, target_qps, nullptr});
  }
  // The broker removed the policy of (service, probe): each probe it applied to goes back to
  // the latest remaining policy that matches it, else to the setting it had before any policy
  // (a fixed threshold, or the controller with its own target). Thread-safe; returns how many
  // probes it changed (0 for a key it does not hold).
  int remove_policy(const std::string& service, const std::string& probe, const std::string& trace_id_prefix = {});
  // (service, probe, trace_id_prefix) of every broker policy in force, oldest push first.
  std::vector<std::tuple<std::string, std::string, std::string>> policy_keys() const;
  // Every prefix rule in force on a probe. The longest of a probe's rules holding an event's
  // trace id is the one that decided it (prefix_rule_of).
  std::vector<PrefixRuleStats> prefix_rules() const;
  // Prefix policies some matching probes refused (no trace-id argument): key -> probe names.
  std::map<std::tuple<std::string, std::string, std::string>, std::set<std::string>> prefix_refusals() const;
  // The prefix (digits) of the rule of `probe_id` that decided trace id (hi, lo); empty: none.
  std::string prefix_rule_of(uint32_t probe_id, uint64_t hi, uint64_t lo) const;
  // One policy_line() (forward/forwarder.h) per policy in force, oldest push first.
  std::vector<std::string> policy_lines() const;
  // Per probe, for the daemon's configuration: a fixed rate, or a target QPS
  // the controller steers to; either becomes what a policy removal returns the probe to.
  // forget() drops a detached probe's state.
  void set_fixed_rate(uint32_t probe_id, double rate);
  void set_target(uint32_t probe_id, double target_qps);
  void forget(uint32_t probe_id);
  // The scope of a probe configured with ProbeConfig::scoped (it sees nothing until one is
  // given): the processes of these pods, whose cgroups are written now and kept current;
  // or the processes in or below these cgroups (a selector's cgroup, a container-aware
  // probe's containers: call again when they change), written now, only the differences;
  // set_scope() throws mcp::Error when the kernel's map is full. forget() drops either.
  void set_selector(uint32_t probe_id, const k8s::PodRef& pods);
  void set_scope(uint32_t probe_id, std::set<uint64_t> cgroups);
  // What the kernel holds for `probe_id` (0: tenants, cgroup -> tenant id).
  std::map<uint64_t, uint64_t> scope(uint32_t probe_id) const;
  // The pod watch's resolution (null: no API access, `why` says why). Call before start();
  // resolves every pod tenant and selector at once.
  void set_pod_cgroups(std::unique_ptr<k8s::PodCgroups> pods, std::string why = {});
  // Replaces the tenant quotas (none: every bucket unlimited).
  void set_quotas(std::optional<control::TenantQuotaTable> quotas);
  // Current kept/offered rates per probe (after stop(), the last ones).
  std::vector<control::ProbeRateStats> rate_stats() const;
  // One steering step at `now_ns` (the thread calls it every tick; tests call it directly).
  void tick(uint64_t now_ns);

 private:
  void run();
  // With a global target QPS, every attached probe not yet steered joins the controller.
  void adopt_probes();
  void apply_quotas(bool rebalance);
  // Under rates_mu_: whether `p` can change a probe, and doing it.
  bool effective(const ProbePolicy& p) const;
  bool matches(const ProbePolicy& p, const loader::ProbeInfo& probe) const;
  void put(const ProbePolicy& p, uint32_t probe_id);
  // Writes the tenant and selector cgroups when they may have changed (always with `force`).
  // Called with rates_mu_ held.
  void refresh_scopes(bool force);
  std::vector<uint64_t> resolve(const k8s::PodRef& ref, const std::string& what);
  ScopeTable::Resolve resolver();

  loader::KernelMaps& session_;
  ControlSettings settings_;
  mutable std::mutex rates_mu_;  // the controller is shared with apply_policy()
  std::unique_ptr<control::RateController> rates_;
  std::set<uint32_t> steered_;  // probes the controller owns; the others keep a fixed rate
  std::set<uint32_t> unwindowed_;  // steered probes whose sampling windows are turned off
  // What a probe a policy changed had before (its own setting), restored when no policy
  // matching it is left; a config change (set_fixed_rate, set_target, forget) clears it.
  struct OwnSetting {
    bool steered = false;
    double target_qps = 0;
    uint64_t threshold = UINT64_MAX;
  };
  std::map<uint32_t, OwnSetting> own_;
  std::vector<ProbePolicy> policies_;  // in force, oldest push first
  // Prefix rules (ProbePolicy::trace_id_prefix), under rates_mu_. An entry is one kernel rule
  // (probe, prefix): its counter slot, the policy that set it (the latest pushed matching the
  // probe) and, steered, its controller id (kPrefixControllerBase + slot).
  struct PrefixEntry {
    TraceIdPrefix prefix;
    uint32_t slot = 0;
    std::string service, probe;  // the policy's key
    double sampling_rate = 0, target_qps = 0;
    uint64_t threshold = UINT64_MAX;
  };
  static constexpr uint32_t kPrefixControllerBase = 1u << 16;
  int apply_prefix_policy(const ProbePolicy& p);
  int remove_prefix_policy(const std::string& service, const std::string& probe, const std::string& prefix);
  // Writes the rule of `p` on probe `id`; false when no slot is left.
  bool put_prefix(const ProbePolicy& p, const TraceIdPrefix& prefix, uint32_t id);
  void erase_prefix(uint32_t id, const std::string& digits);
  void set_prefix_threshold(uint32_t controller_id, uint64_t threshold);
  std::vector<ProbePolicy> prefix_policies_;  // in force, oldest push first
  std::map<std::pair<uint32_t, std::string>, PrefixEntry> prefix_entries_;  // (probe id, digits)
  std::map<std::tuple<std::string, std::string, std::string>, std::set<std::string>> prefix_rejected_;
  mutable std::mutex prefix_mu_;  // prefix_entries_ for the consumer thread (prefix_rule_of)
  std::vector<control::QuotaBalancer> balancers_;
  std::unique_ptr<k8s::PodCgroups> pods_;
  std::string pods_why_ = "no pod watch: " + setting_name(Setting::kPodNames) + " is off";
  bool pods_settled_ = false;  // set_pod_cgroups() or start() came: unresolved references are said
  ScopeTable scopes_;            // the kernel's scope_cgroups: tenants and probe scopes
  std::string scope_error_;      // the last write's failure, said once
  std::set<std::string> warned_;  // references said to match nothing
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex stats_mu_;
  std::vector<control::ProbeRateStats> stats_;
};

}  // namespace mcp::runtime
