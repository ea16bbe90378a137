#include "broker/policy/policy_store.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/trace_id_prefix.h"

namespace mcp::broker {

void write_file_atomically(const std::filesystem::path& file, const std::string& text);

void validate_policy(const mcp::v1::Policy& policy) {
  const double rate = policy.sampling_rate();
  const double qps = policy.target_qps();
  if (rate != 0 && !valid_sampling_rate(rate))
    throw usage_error(std::string("sampling_rate must be in ") + kSamplingRateRange + " (0: unset)");
  if (qps != 0 && !valid_target_qps(qps))
    throw usage_error(std::string("target_qps must be in ") + kTargetQpsRange + " (0: unset)");
  if (rate == 0 && qps == 0) throw usage_error("a policy needs sampling_rate or target_qps");
  // One steers the other away: a probe held at a rate has no QPS to steer to, and the reverse.
  if (rate != 0 && qps != 0) throw usage_error("a policy takes sampling_rate or target_qps, not both");
  if (policy.service().size() > 1024 || policy.probe().size() > 1024)
    throw usage_error("service and probe must be at most 1024 bytes");
  const std::string& prefix = policy.trace_id_prefix();
  if (!prefix.empty() &&
      (!trace_id_prefix_error(prefix).empty() || prefix.find_first_not_of("0123456789abcdef") != std::string::npos))
    throw usage_error("trace_id_prefix must be lowercase hex, 1 to 32 digits");
  if (policy.service_labels_size() > 32) throw usage_error("service_labels: at most 32 pairs");
  for (const auto& [k, v] : policy.service_labels())
    if (k.empty() || k.size() > 256 || v.size() > 256)
      throw usage_error("service_labels: keys of 1 to 256 bytes, values of at most 256");
  if (policy.source().size() > 1024) throw usage_error("source must be at most 1024 bytes");
}

mcp::v1::Policy removal_of(const PolicyKey& key) {
  mcp::v1::Policy p;
  p.set_service(key.service);
  p.set_probe(key.probe);
  p.set_trace_id_prefix(key.trace_id_prefix);
  return p;
}

PolicyKey key_of(const mcp::v1::Policy& policy) {
  return {policy.service(), policy.probe(), policy.trace_id_prefix()};
}

void check_prefix_room(const std::map<PolicyKey, mcp::v1::Policy>& stored, const mcp::v1::Policy& policy) {
  // A replacement takes no more room. The agent's table is shared by every probe, so this is
  // the most that could ever fit, not a promise that this many will.
  if (policy.trace_id_prefix().empty() || stored.count(key_of(policy)) > 0) return;
  size_t rules = 0;
  for (const auto& [key, p] : stored)
    rules += !key.trace_id_prefix.empty() && key.service == policy.service() && key.probe == policy.probe();
  if (rules >= kMaxTraceIdPrefixRules)
    throw usage_error("service '" + policy.service() + "' probe '" + policy.probe() + "' has " + std::to_string(rules) +
                      " trace_id_prefix rules already, the most an agent holds: remove one first");
}

PolicyStore::PolicyStore(std::filesystem::path file, std::shared_ptr<clock::ClockSource> clock)
    : file_(std::move(file)), clock_(clock::clock_or_system(std::move(clock))) {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  const std::filesystem::path quarantine = file_.string() + ".quarantine";
  nlohmann::json records;
  try {
    std::ifstream in(file_);
    records = nlohmann::json::parse(in);
    if (!records.is_array()) throw std::runtime_error("not a JSON array");
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::rename(file_, quarantine, ec);
    spdlog::error("broker: {} unreadable ({}); moved to {}, starting without policies",
                  file_.string(), e.what(), quarantine.string());
    return;
  }
  nlohmann::json bad = nlohmann::json::array();
  for (const auto& j : records) {
    try {
      mcp::v1::Policy p;
      p.set_service(j.value("service", ""));
      p.set_probe(j.value("probe", ""));
      p.set_sampling_rate(j.value("sampling_rate", 0.0));  // NaN was stored as null: throws
      p.set_target_qps(j.value("target_qps", 0.0));
      p.set_updated_unix_ns(j.value("updated_unix_ns", uint64_t{0}));
      if (j.contains("service_labels"))
        for (const auto& [k, v] : j["service_labels"].items()) (*p.mutable_service_labels())[k] = v.get<std::string>();
      p.set_trace_id_prefix(j.value("trace_id_prefix", ""));
      p.set_source(j.value("source", ""));
      validate_policy(p);
      policies_[key_of(p)] = p;
    } catch (const std::exception& e) {
      spdlog::warn("broker: policy {} in {} quarantined to {}: {}", j.dump(), file_.string(),
                   quarantine.string(), e.what());
      bad.push_back(j);
    }
  }
  if (!bad.empty()) {
    try {
      write_file_atomically(quarantine, bad.dump(2));
      persist();  // the file now holds only what loaded, so the next start is quiet
    } catch (const std::exception& e) {
      spdlog::warn("broker: {}", e.what());
    }
  }
}

mcp::v1::Policy PolicyStore::apply(const mcp::v1::Policy& policy) {
  validate_policy(policy);
  check_prefix_room(policies_, policy);
  mcp::v1::Policy stored = policy;
  stored.set_updated_unix_ns(static_cast<uint64_t>(clock_->realtime_ns()));
  policies_[key_of(stored)] = stored;
  persist();
  return stored;
}

bool PolicyStore::remove(const PolicyKey& key) {
  if (policies_.erase(key) == 0) return false;
  persist();
  return true;
}

std::vector<mcp::v1::Policy> PolicyStore::list() const {
  std::vector<mcp::v1::Policy> out;
  for (const auto& [key, p] : policies_) out.push_back(p);
  return out;
}

void PolicyStore::persist() const {
  if (file_.empty()) return;
  nlohmann::json json = nlohmann::json::array();
  for (const auto& [key, p] : policies_) {
    nlohmann::json record{{"service", p.service()},
                          {"probe", p.probe()},
                          {"sampling_rate", p.sampling_rate()},
                          {"target_qps", p.target_qps()},
                          {"updated_unix_ns", p.updated_unix_ns()}};
    if (p.service_labels_size() > 0)
      record["service_labels"] = std::map<std::string, std::string>(p.service_labels().begin(), p.service_labels().end());
    if (!p.trace_id_prefix().empty()) record["trace_id_prefix"] = p.trace_id_prefix();
    if (!p.source().empty()) record["source"] = p.source();
    json.push_back(std::move(record));
  }
  write_file_atomically(file_, json.dump(2));
}

}  // namespace mcp::broker
