// Test support: packaging/grafana/mcp-sampling.json read the way the tests check it: every
// panel target's PromQL with Grafana's variables replaced by values Prometheus accepts
// ($__rate_interval -> 1m, $__range -> 1h, template variables -> .*), and the mcp_* metric
// names each one references. Header-only.
#pragma once
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mcp::test {

struct DashboardQuery {
  std::string panel;  // title
  std::string expr;   // as written in the dashboard
  std::string promql; // variables replaced
  std::set<std::string> metrics;
};

inline nlohmann::json load_dashboard() {
  std::ifstream in(std::string(MCP_SOURCE_DIR) + "/packaging/grafana/mcp-sampling.json");
  return nlohmann::json::parse(in, nullptr, false);
}

inline std::string expand_grafana_variables(std::string expr) {
  expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval|\$__interval)"), "1m");
  expr = std::regex_replace(expr, std::regex(R"(\$__range)"), "1h");
  return std::regex_replace(expr, std::regex(R"(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)"), ".*");
}

inline std::set<std::string> referenced_metrics(const std::string& expr) {
  std::set<std::string> out;
  static const std::regex name(R"(\bmcp_[a-z0-9_]+)");
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name); it != std::sregex_iterator(); ++it)
    out.insert(it->str());
  return out;
}

inline std::vector<DashboardQuery> dashboard_queries(const nlohmann::json& dashboard) {
  std::vector<DashboardQuery> out;
  for (const auto& p : dashboard.value("panels", nlohmann::json::array())) {
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      const std::string expr = t.value("expr", "");
      out.push_back({p.value("title", ""), expr, expand_grafana_variables(expr), referenced_metrics(expr)});
    }
  }
  return out;
}

}  // namespace mcp::test
