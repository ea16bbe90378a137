#include "broker/policy_store.h"

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace mcp::broker {

void write_file_atomically(const std::filesystem::path& file, const std::string& text);

PolicyStore::PolicyStore(std::filesystem::path file) : file_(std::move(file)) {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  std::ifstream in(file_);
  try {
    for (const auto& j : nlohmann::json::parse(in)) {
      mcp::v1::Policy p;
      p.set_service(j.value("service", ""));
      p.set_probe(j.value("probe", ""));
      p.set_sampling_rate(j.value("sampling_rate", 0.0));
      p.set_target_qps(j.value("target_qps", 0.0));
      p.set_updated_unix_ns(j.value("updated_unix_ns", uint64_t{0}));
      policies_[{p.service(), p.probe()}] = p;
    }
  } catch (const std::exception& e) {
    throw runtime_error("broker: bad " + file_.string() + ": " + e.what());
  }
}

mcp::v1::Policy PolicyStore::apply(const mcp::v1::Policy& policy) {
  if (policy.sampling_rate() < 0 || policy.sampling_rate() > 1)
    throw usage_error("sampling_rate must be in (0, 1]");
  if (policy.target_qps() < 0) throw usage_error("target_qps must not be negative");
  if (policy.sampling_rate() == 0 && policy.target_qps() == 0)
    throw usage_error("a policy needs sampling_rate or target_qps");
  mcp::v1::Policy stored = policy;
  stored.set_updated_unix_ns(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count()));
  policies_[{stored.service(), stored.probe()}] = stored;
  persist();
  return stored;
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
    json.push_back({{"service", p.service()},
                    {"probe", p.probe()},
                    {"sampling_rate", p.sampling_rate()},
                    {"target_qps", p.target_qps()},
                    {"updated_unix_ns", p.updated_unix_ns()}});
  }
  write_file_atomically(file_, json.dump(2));
}

}  // namespace mcp::broker
