#include "broker/k8s/policy_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "broker/broker.h"
#include "broker/policy/policy_store.h"
#include "common/error.h"
#include "kube/api_client.h"
#include "kube/list_watch.h"

namespace mcp::broker {
namespace {

using nlohmann::json;

std::string source_of(const std::string& ns, const std::string& name) {
  return "SamplingPolicy " + ns + "/" + name;
}
constexpr std::string_view kSourcePrefix = "SamplingPolicy ";

// A number field: absent -> `fallback`; present but not a finite number -> error.
bool number(const json& spec, const char* field, double& out, std::string& error) {
  if (!spec.contains(field) || spec[field].is_null()) return true;
  if (!spec[field].is_number() || !std::isfinite(spec[field].get<double>())) {
    error = std::string("spec.") + field + " must be a number";
    return false;
  }
  out = spec[field].get<double>();
  return true;
}

}  // namespace

std::optional<PolicySpec> parse_sampling_policy(const json& object, std::string& error) {
  const json spec = object.value("spec", json::object());
  if (!spec.is_object()) {
    error = "spec must be an object";
    return std::nullopt;
  }
  PolicySpec out;
  auto& p = out.policy;
  if (!spec.contains("service") || !spec["service"].is_string() || spec["service"].get<std::string>().empty()) {
    error = "spec.service is required";
    return std::nullopt;
  }
  p.set_service(spec["service"].get<std::string>());
  if (spec.contains("probe")) {
    if (!spec["probe"].is_string()) {
      error = "spec.probe must be a string";
      return std::nullopt;
    }
    p.set_probe(spec["probe"].get<std::string>());
  }
  double rate = 0, qps = 0;
  if (!number(spec, "samplingRate", rate, error) || !number(spec, "targetQps", qps, error) ||
      !number(spec, "qpsThreshold", out.qps_threshold, error))
    return std::nullopt;
  p.set_sampling_rate(rate);
  p.set_target_qps(qps);
  if (out.qps_threshold < 0) {
    error = "spec.qpsThreshold must be at least 0";
    return std::nullopt;
  }
  if (spec.value("strategy", std::string("uniform")) != "uniform") {
    error = "spec.strategy " + spec["strategy"].dump() + " is not supported by the broker's policies (only uniform)";
    return std::nullopt;
  }
  if (spec.contains("serviceLabels")) {
    if (!spec["serviceLabels"].is_object()) {
      error = "spec.serviceLabels must be a map of strings";
      return std::nullopt;
    }
    for (const auto& [k, v] : spec["serviceLabels"].items()) {
      if (!v.is_string()) {
        error = "spec.serviceLabels." + k + " must be a string";
        return std::nullopt;
      }
      (*p.mutable_service_labels())[k] = v.get<std::string>();
    }
  }
  if (spec.contains("traceIdPrefix")) {
    if (!spec["traceIdPrefix"].is_string()) {
      error = "spec.traceIdPrefix must be a string";
      return std::nullopt;
    }
    std::string prefix = spec["traceIdPrefix"].get<std::string>();
    // Stored empty, it would be a policy on the whole probe instead of a prefix rule.
    if (prefix.empty()) {
      error = "spec.traceIdPrefix is empty: give 1 to 32 hex digits, or leave it out for the whole probe";
      return std::nullopt;
    }
    for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    p.set_trace_id_prefix(prefix);
  }
  const json meta = object.value("metadata", json::object());
  p.set_source(source_of(meta.value("namespace", ""), meta.value("name", "")));
  try {
    validate_policy(p);
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
  return out;
}

PolicyTarget broker_policy_target(Broker& broker) {
  PolicyTarget t;
  t.apply = [&broker](const mcp::v1::Policy& p, uint32_t* pushed) { return broker.apply_policy(p, pushed); };
  t.remove = [&broker](const PolicyKey& key) { return broker.remove_policy(key); };
  t.list = [&broker] { return broker.policies(); };
  t.refusals = [&broker] { return broker.policy_refusals(); };
  t.service_counts = [&broker] {
    std::map<std::string, double> out;
    const mcp::v1::StatsReply stats = broker.stats();
    for (const auto& ps : stats.probes()) out[ps.service()] += ps.adjusted_count();
    return out;
  };
  return t;
}

PolicyController::PolicyController(PolicyControllerOptions options, PolicyTarget target)
    : opt_(std::move(options)), target_(std::move(target)) {
  status_client_ = std::make_unique<kube::ApiClient>(opt_.api);
  kube::ListWatchOptions lw;
  lw.path = kSamplingPolicies;
  lw.what = "SamplingPolicy watch";
  lw.watch_timeout_s = opt_.watch_timeout_s;
  lw.backoff_initial = opt_.backoff_initial;
  lw.backoff_max = opt_.backoff_max;
  kube::ListWatchHandlers h;
  h.on_list = [this](const std::vector<json>& items) { on_list(items); };
  h.on_event = [this](std::string_view type, const json& object) { on_event(type, object); };
  watch_ = std::make_unique<kube::ListWatch>(opt_.api, std::move(lw), std::move(h));
}

PolicyController::~PolicyController() { stop(); }

void PolicyController::start() {
  watch_->start();
  ticker_ = std::thread([this] { run_ticker(); });
}

void PolicyController::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  status_client_->stop();  // a write in flight ends now; the handlers' later ones fail at once
  watch_->stop();
  if (ticker_.joinable()) ticker_.join();
}

bool PolicyController::wait_synced(std::chrono::milliseconds limit) const {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, limit, [&] { return synced_; });
}

void PolicyController::on_list(const std::vector<json>& items) {
  std::lock_guard lk(mu_);
  std::set<std::string> present;
  for (const auto& o : items) present.insert(o["metadata"].value("uid", ""));
  std::vector<std::string> gone;
  for (const auto& [uid, e] : entries_)
    if (!present.count(uid)) gone.push_back(uid);
  for (const auto& uid : gone) erase(uid);  // first: frees their (service, probe) for the others
  for (const auto& o : items) upsert(o);
  // Policies this controller stored before (another incarnation of the broker, with a state
  // dir or JetStream) whose objects are gone or no longer hold that key.
  for (const auto& p : target_.list()) {
    if (p.source().rfind(kSourcePrefix, 0) != 0) continue;
    const auto owner = owners_.find(key_of(p));
    if (owner != owners_.end() && entries_[owner->second].applied) continue;
    target_.remove(key_of(p));
    spdlog::info("SamplingPolicy controller: removed stale policy service='{}' probe='{}' ({})", p.service(),
                 p.probe(), p.source());
  }
  synced_ = true;
  cv_.notify_all();
}

void PolicyController::on_event(std::string_view type, const json& object) {
  std::lock_guard lk(mu_);
  if (type == "DELETED")
    erase(object["metadata"].value("uid", ""));
  else
    upsert(object);
}

void PolicyController::upsert(const json& object) {
  const json meta = object.value("metadata", json::object());
  const std::string uid = meta.value("uid", "");
  const int64_t generation = meta.value("generation", int64_t{0});
  if (uid.empty()) return;
  Entry& e = entries_[uid];
  if (e.generation == generation && generation != 0) return;  // a status write, or seen in a relist
  e.ns = meta.value("namespace", "");
  e.name = meta.value("name", "");
  e.generation = generation;
  std::string error;
  auto spec = parse_sampling_policy(object, error);
  const std::string kept =
      e.good ? "; the policy of an earlier generation stays in force" : "";
  if (!spec) {
    e.reason = "Invalid";
    e.message = error + kept;
    spdlog::warn("SamplingPolicy {}/{} generation {}: {}", e.ns, e.name, generation, e.message);
    update_status(e);
    return;
  }
  const Key key = key_of(spec->policy);
  if (const auto o = owners_.find(key); o != owners_.end() && o->second != uid) {
    const Entry& other = entries_[o->second];
    e.reason = "Conflict";
    e.message = "SamplingPolicy " + other.ns + "/" + other.name + " already holds service '" + key.service +
                "' probe '" + key.probe + "'" +
                (key.trace_id_prefix.empty() ? "" : " traceIdPrefix '" + key.trace_id_prefix + "'") + kept;
    spdlog::warn("SamplingPolicy {}/{}: {}", e.ns, e.name, e.message);
    update_status(e);
    return;
  }
  if (e.good) {
    const Key old = key_of(e.good->policy);
    if (old != key) {
      take_out(e);
      owners_.erase(old);
    }
  }
  owners_[key] = uid;
  e.good = std::move(spec);
  e.reason.clear();
  if (e.good->qps_threshold > 0) {
    // Judged again on the current rate with the new threshold.
    e.observed_qps = rate_of(key.service);
    e.above = e.observed_qps > e.good->qps_threshold ||
              (e.above && e.observed_qps >= e.good->qps_threshold * (1 - opt_.qps_hysteresis));
  }
  settle(e);  // the new spec replaces the old one under the same key
  update_status(e);
}

void PolicyController::erase(const std::string& uid) {
  const auto it = entries_.find(uid);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  take_out(e);
  if (e.good) {
    const Key key = key_of(e.good->policy);
    if (const auto o = owners_.find(key); o != owners_.end() && o->second == uid) owners_.erase(o);
  }
  spdlog::info("SamplingPolicy {}/{} deleted", e.ns, e.name);
  entries_.erase(it);
}

// Called when the spec or the threshold's verdict changed: the policy goes in (again, with
// the current spec) or out.
void PolicyController::settle(Entry& e) {
  if (!e.good) return;
  const bool want = e.good->qps_threshold == 0 || e.above;
  if (want) put_in(e);
  if (!want) {
    take_out(e);
    e.reason = "BelowQpsThreshold";
    char line[160];
    std::snprintf(line, sizeof line, "service rate %.1f/s is not above qpsThreshold %.1f/s", e.observed_qps,
                  e.good->qps_threshold);
    e.message = line;
  }
}

void PolicyController::put_in(Entry& e) {
  try {
    uint32_t pushed = 0;
    target_.apply(e.good->policy, &pushed);
    e.applied = true;
    e.pushed = pushed;
    e.reason = "Applied";
    e.message = "pushed to " + std::to_string(pushed) + " agent(s) of this broker";
    spdlog::info("SamplingPolicy {}/{}: policy service='{}' probe='{}' applied, pushed to {} agents", e.ns, e.name,
                 e.good->policy.service(), e.good->policy.probe(), pushed);
  } catch (const std::exception& ex) {
    e.applied = false;
    e.reason = "BrokerRefused";
    e.message = ex.what();
    spdlog::warn("SamplingPolicy {}/{}: the broker refused the policy: {}", e.ns, e.name, ex.what());
  }
}

void PolicyController::take_out(Entry& e) {
  if (!e.applied || !e.good) return;
  try {
    target_.remove(key_of(e.good->policy));
  } catch (const std::exception& ex) {
    spdlog::warn("SamplingPolicy {}/{}: removing the policy: {}", e.ns, e.name, ex.what());
  }
  e.applied = false;
  e.pushed = 0;
  spdlog::info("SamplingPolicy {}/{}: policy service='{}' probe='{}' removed", e.ns, e.name,
               e.good->policy.service(), e.good->policy.probe());
}

void PolicyController::update_status(Entry& e) {
  const bool ok = e.reason == "Applied";
  json status{{"observedGeneration", e.generation},
              {"appliedAgents", e.applied ? e.pushed : 0},
              {"active", e.applied},
              {"message", e.message},
              {"conditions", json::array({{{"type", "Applied"},
                                           {"status", ok ? "True" : "False"},
                                           {"reason", e.reason},
                                           {"message", e.message},
                                           {"observedGeneration", e.generation}}})}};
  if (e.good && e.good->qps_threshold > 0) status["observedQps"] = std::round(e.observed_qps * 10) / 10;
  if (e.applied && !e.refused_by.empty()) {
    status["refusedBy"] = e.refused_by;
    const std::string refused = "; refused by " + std::to_string(e.refused_by.size()) + " agent(s): " + e.refused_by[0] +
                                (e.refused_by.size() > 1 ? ", ..." : "");
    status["message"] = e.message + refused;
    status["conditions"][0]["message"] = e.message + refused;
  }
  if (status == e.written && !e.dirty) return;
  e.written = status;
  e.dirty = true;
  write_status(e);
}

void PolicyController::write_status(Entry& e) {
  // The transition time is stamped per write; comparing `written` leaves it out.
  json body{{"status", e.written}};
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::tm tm{};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  body["status"]["conditions"][0]["lastTransitionTime"] = when;
  const std::string target = "/apis/sampling.mcp.dev/v1alpha1/namespaces/" + e.ns + "/samplingpolicies/" + e.name +
                             "/status";
  const kube::ApiResponse r = status_client_->patch(target, body.dump());
  if (r.status == 200 || r.status == 404) {  // 404: deleted meanwhile, its DELETED is coming
    e.dirty = false;
    if (!status_state_.empty()) spdlog::info("SamplingPolicy status writes work again");
    status_state_.clear();
    return;
  }
  const std::string why = r.status != 0 ? "HTTP " + std::to_string(r.status) : r.error;
  if (why != status_state_ && !status_client_->stopped())
    spdlog::warn("SamplingPolicy {}/{}: writing the status failed ({}); retried every tick", e.ns, e.name, why);
  status_state_ = why;
}

double PolicyController::rate_of(const std::string& service) const {
  if (samples_.size() < 2) return 0;
  const auto& [t0, c0] = samples_.front();
  const auto& [t1, c1] = samples_.back();
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  if (seconds <= 0) return 0;
  const auto a = c0.find(service), b = c1.find(service);
  const double before = a == c0.end() ? 0 : a->second, after = b == c1.end() ? 0 : b->second;
  return std::max(0.0, after - before) / seconds;
}

void PolicyController::tick() {
  const auto counts = target_.service_counts();  // outside the lock: Stats takes the broker's
  const auto refusals = target_.refusals ? target_.refusals() : std::map<PolicyKey, std::vector<std::string>>{};
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  samples_.emplace_back(now, counts);
  // Keep the newest sample at or before the window's start, so the rate covers all of it.
  while (samples_.size() > 2 && samples_[1].first <= now - opt_.qps_window) samples_.pop_front();
  for (auto& [uid, e] : entries_) {
    if (e.good && e.good->qps_threshold > 0) {
      const double n = e.good->qps_threshold;
      e.observed_qps = rate_of(e.good->policy.service());
      const bool above = e.above ? e.observed_qps >= n * (1 - opt_.qps_hysteresis) : e.observed_qps > n;
      if (above != e.above) {
        e.above = above;
        spdlog::info("SamplingPolicy {}/{}: service '{}' at {:.1f}/s, qpsThreshold {}: {}", e.ns, e.name,
                     e.good->policy.service(), e.observed_qps, n, above ? "applying" : "removing");
        if (e.reason != "Invalid" && e.reason != "Conflict") {
          settle(e);
          update_status(e);
        }
      }
    }
    if (e.good) {
      const auto it = refusals.find(key_of(e.good->policy));
      auto refused_by = it == refusals.end() ? std::vector<std::string>{} : it->second;
      if (refused_by != e.refused_by) {
        e.refused_by = std::move(refused_by);
        update_status(e);
      }
    }
    if (e.dirty) write_status(e);
  }
}

void PolicyController::run_ticker() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    lk.unlock();
    tick();
    lk.lock();
    cv_.wait_for(lk, opt_.tick, [&] { return stopping_; });
  }
}

}  // namespace mcp::broker
