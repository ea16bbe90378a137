#include "runtime/control_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/event.h"
#include "forward/forwarder.h"
#include "mcp_abi.h"
#include <time.h>

namespace mcp::runtime {
namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

}  // namespace

ControlLoop::ControlLoop(loader::KernelMaps& session, ControlSettings settings)
    : session_(session), settings_(std::move(settings)), scopes_(session) {
  if (settings_.target_qps || settings_.accept_policies || settings_.probe_targets) {
    // Probes keep their fixed rate until a target (flag, policy or config) makes
    // the controller steer them.
    control::RateControllerConfig cfg;
    cfg.target_qps = settings_.target_qps.value_or(0.0);
    rates_ = std::make_unique<control::RateController>(cfg, [this](uint32_t id, uint64_t threshold) {
      if (id >= kPrefixControllerBase) set_prefix_threshold(id, threshold);
      else session_.set_threshold(id, threshold);
    });
    adopt_probes();
  }
  if (settings_.quotas) {
    balancers_.assign(control::kTenantBuckets, control::QuotaBalancer(session_.ncpus()));
    apply_quotas(false);
    scopes_.set_tenants(settings_.quotas->tenants);
    refresh_scopes(true);
  }
}

ControlLoop::~ControlLoop() { stop(); }

void ControlLoop::adopt_probes() {
  if (!rates_ || !settings_.target_qps) return;
  for (const auto& p : session_.probes()) {
    if (p.internal || steered_.count(p.id)) continue;
    rates_->add_probe(p.id);
    steered_.insert(p.id);
  }
}

void ControlLoop::start() {
  {
    std::lock_guard lock(rates_mu_);
    adopt_probes();  // attached since construction (a runtime builds its loop before its probes)
    if (!pods_settled_) {
      pods_settled_ = true;  // no pod watch was given: say so for each pod reference
      refresh_scopes(true);
    }
  }
  if (!rates_ && !settings_.quotas && !pods_) return;  // nothing to steer or follow
  tick(monotonic_ns());
  thread_ = std::thread([this] { run(); });
}

void ControlLoop::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ControlLoop::run() {
  auto next = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    next += settings_.tick;
    std::this_thread::sleep_until(next);
    try {
      tick(monotonic_ns());
    } catch (const std::exception& e) {
      // A failed map write must not stop steering the other probes.
      spdlog::warn("control tick: {}", e.what());
    }
  }
}

void ControlLoop::tick(uint64_t now_ns) {
  if (rates_) {
    std::lock_guard rates_lock(rates_mu_);
    std::vector<control::ProbeSample> samples;
    const auto all = session_.all_counters();  // one batch lookup per tick
    for (const auto& p : session_.probes()) {
      // The controller estimates the offered rate from every call seen: its probes are never
      // sampled in time windows (loader/sampling_windows.h); a probe it lets go may be again.
      if (const bool steered = steered_.count(p.id) > 0; steered != (unwindowed_.count(p.id) > 0)) {
        session_.set_windows_allowed(p.id, !steered);
        if (steered) unwindowed_.insert(p.id);
        else unwindowed_.erase(p.id);
      }
      if (!steered_.count(p.id)) continue;
      const auto& c = all[p.id];
      samples.push_back({p.id, {c.seen, c.kept, c.lost, c.quota_dropped}});
    }
    for (const auto& [key, e] : prefix_entries_) {
      if (e.target_qps <= 0) continue;
      const auto c = session_.prefix_counters(e.slot);
      samples.push_back({kPrefixControllerBase + e.slot, {c.seen, c.kept, 0, c.quota_dropped}});
    }
    rates_->tick(now_ns, samples);
    std::lock_guard lock(stats_mu_);
    stats_ = rates_->all_stats();
  }
  if (settings_.quotas) {
    std::lock_guard lock(rates_mu_);
    if (settings_.quotas) apply_quotas(true);
  }
  if (pods_) {
    std::lock_guard lock(rates_mu_);
    if (scopes_.names_pods()) refresh_scopes(false);
  }
}

std::vector<uint64_t> ControlLoop::resolve(const k8s::PodRef& ref, const std::string& what) {
  if (pods_) return pods_->resolve(ref);
  if (pods_settled_ && warned_.insert(what).second)
    spdlog::warn("{} matches no process: pods cannot be resolved ({})", what, pods_why_);
  return {};
}

ScopeTable::Resolve ControlLoop::resolver() {
  return [this](const k8s::PodRef& ref, const std::string& what) { return resolve(ref, what); };
}

void ControlLoop::refresh_scopes(bool force) {
  if (pods_ && pods_->begin_round()) force = true;
  if (!force) return;
  try {
    scopes_.write(resolver());
    scope_error_.clear();
  } catch (const std::exception& e) {
    // Said once per distinct failure; the next write retries what did not fit.
    if (scope_error_ != e.what()) spdlog::error("tenant and probe scopes: {}", e.what());
    scope_error_ = e.what();
  }
}

void ControlLoop::set_selector(uint32_t probe_id, const k8s::PodRef& pods) {
  std::lock_guard lock(rates_mu_);
  scopes_.set_probe(probe_id, pods);
  // A round that found changes must reach every tenant and selector, not only this one.
  if (pods_ && pods_->begin_round()) refresh_scopes(true);
  else scopes_.write(probe_id, resolver());
}

void ControlLoop::set_scope(uint32_t probe_id, std::set<uint64_t> cgroups) {
  std::lock_guard lock(rates_mu_);
  scopes_.set_probe(probe_id, std::move(cgroups));
  scopes_.write(probe_id, resolver());
}

std::map<uint64_t, uint64_t> ControlLoop::scope(uint32_t probe_id) const {
  std::lock_guard lock(rates_mu_);
  return scopes_.written(probe_id);
}

void ControlLoop::set_pod_cgroups(std::unique_ptr<k8s::PodCgroups> pods, std::string why) {
  std::lock_guard lock(rates_mu_);
  pods_ = std::move(pods);
  pods_settled_ = true;
  if (!why.empty()) pods_why_ = std::move(why);
  refresh_scopes(true);
}

void ControlLoop::apply_quotas(bool rebalance) {
  const auto& table = *settings_.quotas;
  for (uint32_t b = 0; b < control::kTenantBuckets; b++) {
    const auto& q = table.buckets[b];
    if (q.burst == 0) continue;  // unlimited bucket: nothing to split
    const auto& shares = rebalance ? balancers_[b].update(session_.tenant_demand_per_cpu(b)) : balancers_[b].shares();
    session_.set_quota(b, q.rate_per_s, q.burst, shares);
  }
}

void ControlLoop::set_fixed_rate(uint32_t probe_id, double rate) {
  std::lock_guard lock(rates_mu_);
  own_.erase(probe_id);
  if (rates_) rates_->remove_probe(probe_id);
  steered_.erase(probe_id);
  session_.set_threshold(probe_id, probability_to_threshold(rate));
}

void ControlLoop::set_target(uint32_t probe_id, double target_qps) {
  std::lock_guard lock(rates_mu_);
  if (!rates_) return;
  own_.erase(probe_id);
  steered_.insert(probe_id);
  rates_->set_target(probe_id, target_qps);
}

void ControlLoop::forget(uint32_t probe_id) {
  std::lock_guard lock(rates_mu_);
  unwindowed_.erase(probe_id);
  own_.erase(probe_id);
  scopes_.forget(probe_id);
  if (rates_) rates_->remove_probe(probe_id);
  steered_.erase(probe_id);
  std::vector<std::string> prefixes;
  for (const auto& [key, e] : prefix_entries_)
    if (key.first == probe_id) prefixes.push_back(key.second);
  for (const auto& digits : prefixes) erase_prefix(probe_id, digits);
}

void ControlLoop::set_quotas(std::optional<control::TenantQuotaTable> quotas) {
  std::lock_guard lock(rates_mu_);
  // Buckets that lose their quota become unlimited again.
  if (settings_.quotas)
    for (uint32_t b = 0; b < control::kTenantBuckets; b++)
      if (settings_.quotas->buckets[b].burst && (!quotas || quotas->buckets[b].burst == 0)) session_.set_quota(b, 0, 0);
  settings_.quotas = std::move(quotas);
  scopes_.set_tenants(settings_.quotas ? settings_.quotas->tenants : std::vector<control::ResolvedTenant>{});
  refresh_scopes(true);
  if (settings_.quotas) {
    if (balancers_.empty()) balancers_.assign(control::kTenantBuckets, control::QuotaBalancer(session_.ncpus()));
    apply_quotas(false);
  }
}

bool ControlLoop::effective(const ProbePolicy& p) const {
  return p.sampling_rate > 0 || (p.target_qps > 0 && rates_);
}

bool ControlLoop::matches(const ProbePolicy& p, const loader::ProbeInfo& probe) const {
  if (probe.internal) return false;
  if (p.matches) return p.matches(probe);
  return p.probe.empty() || p.probe == probe.name || p.probe == probe.symbol;
}

void ControlLoop::put(const ProbePolicy& p, uint32_t id) {
  if (!own_.count(id)) {
    OwnSetting own;
    own.steered = steered_.count(id) > 0;
    if (own.steered && rates_) {
      const auto st = rates_->stats(id);
      own.target_qps = st ? st->target_qps : settings_.target_qps.value_or(0.0);
    }
    own.threshold = session_.threshold(id);
    own_[id] = own;
  }
  if (p.sampling_rate > 0) {
    if (rates_) rates_->remove_probe(id);
    steered_.erase(id);
    session_.set_threshold(id, probability_to_threshold(p.sampling_rate));
  } else {
    steered_.insert(id);
    rates_->set_target(id, p.target_qps);
  }
}

int ControlLoop::apply_policy(ProbePolicy policy) {
  std::lock_guard lock(rates_mu_);
  if (!policy.trace_id_prefix.empty()) {
    std::erase_if(prefix_policies_, [&](const ProbePolicy& p) {
      return p.service == policy.service && p.probe == policy.probe && p.trace_id_prefix == policy.trace_id_prefix;
    });
    prefix_policies_.push_back(std::move(policy));
    return apply_prefix_policy(prefix_policies_.back());
  }
  std::erase_if(policies_, [&](const ProbePolicy& p) { return p.service == policy.service && p.probe == policy.probe; });
  policies_.push_back(std::move(policy));
  const ProbePolicy& p = policies_.back();
  if (!effective(p)) return 0;
  int changed = 0;
  for (const auto& probe : session_.probes()) {
    if (!matches(p, probe)) continue;
    put(p, probe.id);
    changed++;
  }
  return changed;
}

std::vector<std::tuple<std::string, std::string, std::string>> ControlLoop::policy_keys() const {
  std::lock_guard lock(rates_mu_);
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const auto& p : policies_) out.emplace_back(p.service, p.probe, std::string());
  for (const auto& p : prefix_policies_) out.emplace_back(p.service, p.probe, p.trace_id_prefix);
  return out;
}

std::vector<std::string> ControlLoop::policy_lines() const {
  std::lock_guard lock(rates_mu_);
  std::vector<std::string> out;
  for (const auto& p : policies_) out.push_back(policy_line(p.service, p.probe, p.sampling_rate, p.target_qps));
  for (const auto& p : prefix_policies_) {
    std::string line = policy_line(p.service, p.probe, p.sampling_rate, p.target_qps, p.trace_id_prefix);
    const auto it = prefix_rejected_.find({p.service, p.probe, p.trace_id_prefix});
    if (it != prefix_rejected_.end() && !it->second.empty()) {
      line += " rejected_by=";
      for (const auto& name : it->second) line += (name == *it->second.begin() ? "" : ",") + name;
      line += " (no trace-id argument)";
    }
    out.push_back(std::move(line));
  }
  return out;
}

int ControlLoop::apply_prefix_policy(const ProbePolicy& p) {
  const auto prefix = parse_trace_id_prefix(p.trace_id_prefix);
  if (!prefix) {
    spdlog::warn("policy for service '{}' probe '{}': {}; not applied", p.service, p.probe,
                 trace_id_prefix_error(p.trace_id_prefix));
    return 0;
  }
  if (!effective(p)) return 0;
  auto& rejected = prefix_rejected_[{p.service, p.probe, p.trace_id_prefix}];
  rejected.clear();
  int changed = 0;
  for (const auto& probe : session_.probes()) {
    if (!matches(p, probe)) continue;
    if (!probe.trace_id) {
      // Without a trace id every call would fall under no prefix: refusing says so.
      rejected.insert(probe.name);
      continue;
    }
    if (put_prefix(p, *prefix, probe.id)) changed++;
  }
  if (!rejected.empty())
    spdlog::warn("policy for service '{}' probe '{}' trace_id_prefix {}: rejected by {} probe(s) without a trace-id "
                 "argument (first: {})", p.service, p.probe, p.trace_id_prefix, rejected.size(), *rejected.begin());
  return changed;
}

bool ControlLoop::put_prefix(const ProbePolicy& p, const TraceIdPrefix& prefix, uint32_t id) {
  const std::pair<uint32_t, std::string> key{id, prefix.digits};
  auto it = prefix_entries_.find(key);
  if (it == prefix_entries_.end()) {
    std::set<uint32_t> used;
    for (const auto& [k, e] : prefix_entries_) used.insert(e.slot);
    uint32_t slot = 1;
    while (slot < MCP_MAX_TRACE_PREFIXES && used.count(slot)) slot++;
    if (slot >= MCP_MAX_TRACE_PREFIXES) {
      spdlog::warn("trace-id prefix {} on probe {}: every one of the {} prefix rules is taken; not applied",
                   prefix.digits, id, MCP_MAX_TRACE_PREFIXES - 1);
      return false;
    }
    session_.clear_prefix_counters(slot);
    std::lock_guard lock(prefix_mu_);
    it = prefix_entries_.emplace(key, PrefixEntry{prefix, slot}).first;
  }
  PrefixEntry& e = it->second;
  e.service = p.service;
  e.probe = p.probe;
  e.sampling_rate = p.sampling_rate;
  e.target_qps = p.sampling_rate > 0 ? 0 : p.target_qps;
  const uint32_t controller_id = kPrefixControllerBase + e.slot;
  if (e.target_qps > 0) {
    if (rates_->stats(controller_id)) rates_->set_target(controller_id, e.target_qps);
    else rates_->add_probe(controller_id, e.target_qps);  // writes the rule through set_prefix_threshold
    if (rates_->stats(controller_id)) return true;
  } else if (rates_) {
    rates_->remove_probe(controller_id);
  }
  e.threshold = e.target_qps > 0 ? UINT64_MAX : probability_to_threshold(e.sampling_rate);
  session_.put_trace_prefix(id, e.prefix, e.slot, e.threshold);
  return true;
}

void ControlLoop::set_prefix_threshold(uint32_t controller_id, uint64_t threshold) {
  for (auto& [key, e] : prefix_entries_)
    if (kPrefixControllerBase + e.slot == controller_id) {
      e.threshold = threshold;
      session_.put_trace_prefix(key.first, e.prefix, e.slot, threshold);
      return;
    }
}

void ControlLoop::erase_prefix(uint32_t id, const std::string& digits) {
  const auto it = prefix_entries_.find({id, digits});
  if (it == prefix_entries_.end()) return;
  if (rates_) rates_->remove_probe(kPrefixControllerBase + it->second.slot);
  session_.erase_trace_prefix(id, it->second.prefix);
  std::lock_guard lock(prefix_mu_);
  prefix_entries_.erase(it);
}

int ControlLoop::remove_prefix_policy(const std::string& service, const std::string& probe, const std::string& prefix) {
  const auto it = std::find_if(prefix_policies_.begin(), prefix_policies_.end(), [&](const ProbePolicy& p) {
    return p.service == service && p.probe == probe && p.trace_id_prefix == prefix;
  });
  if (it == prefix_policies_.end()) return 0;
  prefix_policies_.erase(it);
  prefix_rejected_.erase({service, probe, prefix});
  int changed = 0;
  for (const auto& info : session_.probes()) {
    const auto e = prefix_entries_.find({info.id, prefix});
    if (e == prefix_entries_.end() || e->second.service != service || e->second.probe != probe) continue;
    // An earlier rule for the same prefix that matches the probe takes it back, else the probe's rate.
    const ProbePolicy* next = nullptr;
    for (auto p = prefix_policies_.rbegin(); p != prefix_policies_.rend() && !next; ++p)
      if (p->trace_id_prefix == prefix && matches(*p, info)) next = &*p;
    if (next) put_prefix(*next, e->second.prefix, info.id);
    else erase_prefix(info.id, prefix);
    changed++;
  }
  return changed;
}

std::map<std::tuple<std::string, std::string, std::string>, std::set<std::string>> ControlLoop::prefix_refusals() const {
  std::lock_guard lock(rates_mu_);
  auto out = prefix_rejected_;
  std::erase_if(out, [](const auto& kv) { return kv.second.empty(); });
  return out;
}

std::vector<PrefixRuleStats> ControlLoop::prefix_rules() const {
  std::lock_guard lock(rates_mu_);
  std::vector<PrefixRuleStats> out;
  for (const auto& [key, e] : prefix_entries_)
    out.push_back({key.first, e.prefix.digits, threshold_to_probability(e.threshold), e.target_qps,
                   session_.prefix_counters(e.slot)});
  return out;
}

std::string ControlLoop::prefix_rule_of(uint32_t probe_id, uint64_t hi, uint64_t lo) const {
  std::lock_guard lock(prefix_mu_);
  const std::string* best = nullptr;
  for (auto it = prefix_entries_.lower_bound({probe_id, std::string()});
       it != prefix_entries_.end() && it->first.first == probe_id; ++it)
    if (it->second.prefix.matches(hi, lo) && (!best || it->first.second.size() > best->size())) best = &it->first.second;
  return best ? *best : std::string();
}

int ControlLoop::remove_policy(const std::string& service, const std::string& probe_key, const std::string& prefix) {
  std::lock_guard lock(rates_mu_);
  if (!prefix.empty()) return remove_prefix_policy(service, probe_key, prefix);
  const auto it = std::find_if(policies_.begin(), policies_.end(),
                               [&](const ProbePolicy& p) { return p.service == service && p.probe == probe_key; });
  if (it == policies_.end()) return 0;
  const auto later = [&](const loader::ProbeInfo& probe) {  // a policy pushed after it wins anyway
    return std::any_of(std::next(it), policies_.end(), [&](const ProbePolicy& p) { return effective(p) && matches(p, probe); });
  };
  std::vector<loader::ProbeInfo> affected;
  for (const auto& probe : session_.probes())
    // Only probes it set: the config may have taken one back since (own_ cleared).
    if (effective(*it) && own_.count(probe.id) && matches(*it, probe) && !later(probe)) affected.push_back(probe);
  policies_.erase(it);
  int changed = 0;
  for (const auto& probe : affected) {
    const ProbePolicy* next = nullptr;
    for (auto p = policies_.rbegin(); p != policies_.rend() && !next; ++p)
      if (effective(*p) && matches(*p, probe)) next = &*p;
    if (next) {
      put(*next, probe.id);
      changed++;
      continue;
    }
    const auto own = own_.find(probe.id);
    if (own->second.steered && rates_) {
      steered_.insert(probe.id);
      rates_->add_probe(probe.id, own->second.target_qps);
    } else {
      if (rates_) rates_->remove_probe(probe.id);
      steered_.erase(probe.id);
      session_.set_threshold(probe.id, own->second.threshold);
    }
    own_.erase(own);
    changed++;
  }
  return changed;
}

std::vector<control::ProbeRateStats> ControlLoop::rate_stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace mcp::runtime
