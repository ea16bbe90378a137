#include "subscribe/sample_json.h"

#include <fmt/format.h>

#include "common/event.h"

namespace mcp {
namespace {
double weight_of(const mcp::v1::Sample& s) {
  if (s.threshold() == 0) return 1.0;
  return 1.0 / threshold_to_probability(s.threshold());
}
}  // namespace

nlohmann::json sample_to_json(const mcp::v1::Sample& s) {
  nlohmann::json j;
  j["ts_ns"] = s.ts_ns();
  j["ktime_ns"] = s.ktime_ns();
  j["hlc"] = s.hlc();
  j["kind"] = s.kind();
  j["probe"] = s.probe();
  j["pid"] = s.pid();
  j["tid"] = s.tid();
  j["comm"] = s.comm();
  j["cgroup_id"] = s.cgroup_id();
  j["cpu"] = s.cpu();
  j["args"] = std::vector<uint64_t>(s.args().begin(), s.args().end());
  if (s.has_ret()) j["ret"] = s.ret();
  if (s.has_duration()) j["duration_ns"] = s.duration_ns();
  j["weight"] = weight_of(s);
  j["threshold"] = s.threshold();
  if (!s.th().empty()) j["th"] = s.th();
  j["service"] = s.service();
  nlohmann::json tags = nlohmann::json::object();
  for (const auto& [k, v] : s.tags()) tags[k] = v;
  j["tags"] = std::move(tags);
  if (!s.container_id().empty()) j["container_id"] = s.container_id();
  if (!s.attributes().empty()) {
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [k, v] : s.attributes()) attrs[k] = v;
    j["attributes"] = std::move(attrs);
  }
  if (s.has_cuda()) {
    const auto& c = s.cuda();
    nlohmann::json cj;
    cj["api"] = c.api();
    if (!c.kernel().empty()) cj["kernel"] = c.kernel();
    cj["grid"] = std::vector<uint32_t>(c.grid().begin(), c.grid().end());
    cj["block"] = std::vector<uint32_t>(c.block().begin(), c.block().end());
    cj["shared_mem"] = c.shared_mem();
    cj["stream"] = c.stream();
    cj["bytes"] = c.bytes();
    cj["memcpy_kind"] = c.memcpy_kind();
    cj["slow_mode"] = c.slow_mode();
    if (!c.user_stack().empty())
      cj["user_stack"] = std::vector<uint64_t>(c.user_stack().begin(), c.user_stack().end());
    j["cuda"] = std::move(cj);
  }
  if (!s.agent_id().empty()) j["agent_id"] = s.agent_id();
  j["event_id"] = s.event_id();
  return j;
}

std::string table_header() {
  return fmt::format("{:<20} {:<9} {:<40} {:>7} {:>7} {:<16} {:>12} {:>12} {:>10} {}", "TS_NS",
                     "KIND", "PROBE", "PID", "TID", "COMM", "RET", "DURATION_NS", "WEIGHT",
                     "SERVICE");
}

std::string sample_to_table_row(const mcp::v1::Sample& s) {
  return fmt::format("{:<20} {:<9} {:<40} {:>7} {:>7} {:<16} {:>12} {:>12} {:>10.4g} {}", s.ts_ns(),
                     s.kind(), s.probe(), s.pid(), s.tid(), s.comm(),
                     s.has_ret() ? std::to_string(s.ret()) : "-",
                     s.has_duration() ? std::to_string(s.duration_ns()) : "-", weight_of(s),
                     s.service());
}

}  // namespace mcp
