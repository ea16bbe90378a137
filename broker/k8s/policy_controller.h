// PolicyController: SamplingPolicy objects (sampling.mcp.dev/v1alpha1, every namespace) ->
// broker policies, with what happened written back to each object's status.
//   kube::ListWatch (list, watch from its version, relist on 410 Gone, rewatch after a drop,
//   backoff on errors) -> each object is one broker policy keyed (service, probe,
//   traceIdPrefix) with source
//   "SamplingPolicy NS/NAME". A list replaces the whole set: policies of this controller whose
//   objects are gone are removed, so a relist neither loses nor duplicates, and a broker that
//   restarts forgets objects deleted meanwhile. DELETED removes the policy.
//   A generation is handled once: the MODIFIED that a status write causes changes nothing.
//   An object the broker cannot apply (a bad field, strategy weighted, a key another object
//   holds) gets Applied=False
//   with the reason; the policy of its last good generation, if any, and every other object's
//   policy stay in force. DELETED, a relist without the object, and a qpsThreshold no longer
//   met remove the policy, and the broker pushes the removal to its agents (they go back to
//   their own rates). serviceLabels travel with the policy; agents match them to probe tags. A
//   traceIdPrefix makes it a prefix rule on the agents (runtime/control_loop.h ProbePolicy): a
//   probe without a trace-id argument refuses it: that agent's log and /healthz say so, and its
//   policy_status reaches the object's status (refusedBy).
//   qpsThreshold N: the policy is in the broker only while its service's rate at the broker is
//   above N: the adjusted counts (sum of weights, an estimate of the calls whatever sampling is
//   in force) of the service's stored events over the last qps_window, divided by the window
//   actually covered. It goes in when the rate rises above N and out when it falls below
//   N * (1 - qps_hysteresis); in between it stays as it is.
// Status (a JSON merge patch of the status subresource): observedGeneration, appliedAgents
// (agents of this broker the policy was pushed to), active, observedQps (threshold policies, at
// the last change), refusedBy (agents whose probes refused the policy, e.g. a traceIdPrefix on a
// probe without a trace-id argument: "AGENT: PROBE (REASON)", from their policy_status, checked
// every tick), message, conditions [{type: Applied, status, reason, message}]. Written only
// when it changes; a failed write is retried every tick.
// Threads: the list-watch thread runs the handlers, a ticker the rates and retries; both under
// one lock. stop() (or the destructor) ends both.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/policy/policy_key.h"
#include "kube/api_config.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::kube {
class ApiClient;
class ListWatch;
}  // namespace mcp::kube

namespace mcp::broker {

class Broker;

inline constexpr const char* kSamplingPolicies = "/apis/sampling.mcp.dev/v1alpha1/samplingpolicies";

// Where policies go: the broker (broker_policy_target) or a test double.
struct PolicyTarget {
  // Stores and pushes; throws mcp::Error for a policy the broker refuses.
  std::function<mcp::v1::Policy(const mcp::v1::Policy&, uint32_t* pushed)> apply;
  std::function<bool(const PolicyKey& key)> remove;
  std::function<std::vector<mcp::v1::Policy>()> list;
  // What connected agents refused of each policy (Broker::policy_refusals); null: nothing.
  std::function<std::map<PolicyKey, std::vector<std::string>>()> refusals;
  // Cumulative adjusted counts of the stored events, by service.
  std::function<std::map<std::string, double>()> service_counts;
};
PolicyTarget broker_policy_target(Broker& broker);

struct PolicyControllerOptions {
  kube::ApiConfig api;
  std::chrono::milliseconds tick{1000};         // rates sampled, failed status writes retried
  std::chrono::milliseconds qps_window{10000};  // the rate of qpsThreshold is over this long
  double qps_hysteresis = 0.2;                  // out below N * (1 - this)
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30000};
  int watch_timeout_s = 300;
};

// One SamplingPolicy's spec as the broker applies it; nullopt and `error` set (one line naming
// the field) when it cannot be. Pure: unit-tested on its own.
struct PolicySpec {
  mcp::v1::Policy policy;
  double qps_threshold = 0;  // 0: always applied
};
std::optional<PolicySpec> parse_sampling_policy(const nlohmann::json& object, std::string& error);

class PolicyController {
 public:
  PolicyController(PolicyControllerOptions options, PolicyTarget target);
  ~PolicyController();
  PolicyController(const PolicyController&) = delete;
  PolicyController& operator=(const PolicyController&) = delete;

  void start();
  void stop();
  // Until the first list was applied (true) or `limit` passed.
  bool wait_synced(std::chrono::milliseconds limit) const;

 private:
  struct Entry {
    std::string ns, name;
    int64_t generation = -1;         // the last generation handled
    std::optional<PolicySpec> good;  // the last generation that could be applied
    bool applied = false;            // good's policy is in the broker
    bool above = false;              // qpsThreshold: the rate is above it (with hysteresis)
    double observed_qps = 0;
    uint32_t pushed = 0;
    std::string reason, message;     // the Applied condition's, for the latest generation
    std::vector<std::string> refused_by;  // agents whose probes refused the applied policy
    nlohmann::json written;          // the status last written (null: none yet)
    bool dirty = false;              // a status write is due
  };
  using Key = PolicyKey;

  void on_list(const std::vector<nlohmann::json>& items);
  void on_event(std::string_view type, const nlohmann::json& object);
  void upsert(const nlohmann::json& object);
  void erase(const std::string& uid);
  void settle(Entry& e);              // applies or removes good's policy as its threshold says
  void put_in(Entry& e);
  void take_out(Entry& e);
  void update_status(Entry& e);       // computes the status; writes it when it changed
  void write_status(Entry& e);
  void tick();
  double rate_of(const std::string& service) const;
  void run_ticker();

  PolicyControllerOptions opt_;
  PolicyTarget target_;
  std::unique_ptr<kube::ApiClient> status_client_;
  std::unique_ptr<kube::ListWatch> watch_;
  std::thread ticker_;

  mutable std::mutex mu_;  // everything below
  mutable std::condition_variable cv_;
  bool stopping_ = false;
  bool synced_ = false;
  std::map<std::string, Entry> entries_;  // by metadata.uid
  std::map<Key, std::string> owners_;     // (service, probe, trace_id_prefix) -> uid
  // (time, cumulative adjusted counts by service), oldest first, spanning qps_window
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::map<std::string, double>>> samples_;
  std::string status_state_;  // the last status-write failure logged
};

}  // namespace mcp::broker
