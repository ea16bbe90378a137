// packaging/grafana/mcp-sampling.json: a Grafana dashboard whose queries cannot drift from what
// the agent and broker export. Checked here: the JSON and the schema fields Grafana reads, every
// PromQL expression parsed by Prometheus's own parser (`promtool check rules`), every mcp_*
// metric and every grouping label one of the names tables declares (the tables the agent and
// broker register from), and the kustomization shipping it as a ConfigMap labelled
// grafana_dashboard: "1". The broker e2e test evaluates the broker panels on a real Prometheus.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <regex>
#include <set>

#include "broker/broker_metrics.h"
#include "metrics/names.h"
#include "metrics/registry.h"
#include "test_util.h"
#include "../../support/grafana_dashboard.h"

namespace mcp::packaging_test {
namespace {

namespace fs = std::filesystem;

const fs::path kDashboard = source_dir() / "packaging/grafana/mcp-sampling.json";

// Every exported metric name -> its label names.
std::map<std::string, std::set<std::string>> exported_metrics() {
  std::map<std::string, std::set<std::string>> out;
  auto add = [&](const metrics::MetricSpec& spec) {
    auto labels = metrics::spec_labels(spec);
    out[std::string(spec.name)] = std::set<std::string>(labels.begin(), labels.end());
  };
  for (const auto& s : metrics::kAgentMetrics) add(s);
  for (const auto& s : broker::kBrokerMetrics) add(s);
  return out;
}

TEST(GrafanaDashboard, IsValidJsonWithTheFieldsGrafanaReads) {
  const auto d = test::load_dashboard();
  ASSERT_FALSE(d.is_discarded()) << kDashboard << " is not valid JSON";
  EXPECT_EQ(d.value("uid", ""), "mcp-sampling");
  EXPECT_FALSE(d.value("title", "").empty());
  ASSERT_TRUE(d["schemaVersion"].is_number_integer());
  EXPECT_GE(d["schemaVersion"].get<int>(), 30);
  ASSERT_TRUE(d["panels"].is_array());
  ASSERT_GE(d["panels"].size(), 10u);
  // Template variables: a Prometheus data source picker, and the ones the queries use.
  std::set<std::string> variables;
  for (const auto& v : d["templating"]["list"]) {
    variables.insert(v.value("name", ""));
    if (v.value("type", "") == "datasource") EXPECT_EQ(v.value("query", ""), "prometheus");
  }
  ASSERT_TRUE(variables.count("datasource"));
  std::set<int> ids;
  std::set<std::pair<int, int>> cells;  // (x, y) grid cells taken: panels may not overlap
  for (const auto& p : d["panels"]) {
    const std::string title = p.value("title", "");
    EXPECT_FALSE(title.empty());
    ASSERT_TRUE(p["id"].is_number_integer()) << title;
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id in " << title;
    const std::string type = p.value("type", "");
    EXPECT_TRUE(type == "row" || type == "timeseries" || type == "stat") << title << ": " << type;
    const auto& g = p["gridPos"];
    for (const char* k : {"h", "w", "x", "y"}) ASSERT_TRUE(g[k].is_number_integer()) << title << " gridPos." << k;
    EXPECT_LE(g["x"].get<int>() + g["w"].get<int>(), 24) << title;
    for (int x = g["x"]; x < g["x"].get<int>() + g["w"].get<int>(); ++x)
      for (int y = g["y"]; y < g["y"].get<int>() + g["h"].get<int>(); ++y)
        EXPECT_TRUE(cells.insert({x, y}).second) << title << " overlaps another panel at " << x << "," << y;
    if (type == "row") continue;
    EXPECT_EQ(p["datasource"].value("uid", ""), "${datasource}") << title;
    ASSERT_FALSE(p["targets"].empty()) << title;
    std::set<std::string> refs;
    for (const auto& t : p["targets"]) {
      EXPECT_TRUE(refs.insert(t.value("refId", "")).second) << title << ": duplicate refId";
      const std::string expr = t.value("expr", "");
      EXPECT_FALSE(expr.empty()) << title;
      static const std::regex var(R"(\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?)");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), var); it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1];
        EXPECT_TRUE(name.starts_with("__") || variables.count(name)) << title << ": undefined $" << name;
      }
    }
  }
}

TEST(GrafanaDashboard, EveryExpressionParsesAsPromQL) {
  if (!have_tool("promtool")) GTEST_SKIP() << "promtool not installed (scripts/setup installs prometheus)";
  const auto queries = test::dashboard_queries(test::load_dashboard());
  ASSERT_FALSE(queries.empty());
  // Recording rules are the one place promtool parses arbitrary expressions offline.
  YAML::Emitter rules;
  rules << YAML::BeginMap << YAML::Key << "groups" << YAML::Value << YAML::BeginSeq << YAML::BeginMap
        << YAML::Key << "name" << YAML::Value << "dashboard" << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (size_t i = 0; i < queries.size(); ++i)
    rules << YAML::BeginMap << YAML::Key << "record" << YAML::Value << "dashboard:expr_" + std::to_string(i)
          << YAML::Key << "expr" << YAML::Value << queries[i].promql << YAML::EndMap;
  rules << YAML::EndSeq << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  TempDir dir;
  write_file(dir.path() / "rules.yml", rules.c_str());
  const auto r = run_shell("promtool check rules " + (dir.path() / "rules.yml").string());
  EXPECT_EQ(r.exit_code, 0) << r.out << rules.c_str();
  EXPECT_NE(r.out.find("SUCCESS: " + std::to_string(queries.size()) + " rules found"), std::string::npos)
      << r.out;
}

TEST(GrafanaDashboard, EveryMetricAndGroupingLabelIsOneTheAgentOrBrokerExports) {
  const auto exported = exported_metrics();
  const auto d = test::load_dashboard();
  std::set<std::string> used;
  for (const auto& q : test::dashboard_queries(d)) {
    EXPECT_FALSE(q.metrics.empty()) << q.panel << ": " << q.expr;
    std::set<std::string> labels{"instance", "job"};  // added by Prometheus to every series
    for (const auto& m : q.metrics) {
      used.insert(m);
      const auto it = exported.find(m);
      if (it == exported.end()) {
        ADD_FAILURE() << q.panel << ": " << m << " is in no names table (metrics/names.h, broker/broker_metrics.h)";
        continue;
      }
      labels.insert(it->second.begin(), it->second.end());
    }
    // Labels grouped by, matched on or shown in a legend must exist on the metrics queried.
    static const std::regex by(R"(\bby \(([^)]*)\))"), matcher(R"(([a-z_]+)=~?\")");
    for (auto it = std::sregex_iterator(q.expr.begin(), q.expr.end(), by); it != std::sregex_iterator(); ++it) {
      std::stringstream list((*it)[1].str());
      for (std::string l; std::getline(list, l, ',');) {
        l.erase(0, l.find_first_not_of(' '));
        EXPECT_TRUE(labels.count(l)) << q.panel << ": grouped by '" << l << "', which " << *q.metrics.begin() << " lacks";
      }
    }
    for (auto it = std::sregex_iterator(q.expr.begin(), q.expr.end(), matcher); it != std::sregex_iterator(); ++it)
      EXPECT_TRUE(labels.count((*it)[1].str())) << q.panel << ": matches on '" << (*it)[1] << "'";
  }
  for (const auto& v : d["templating"]["list"])
    for (const auto& m : test::referenced_metrics(v.value("definition", "")))
      EXPECT_TRUE(exported.count(m)) << "variable " << v.value("name", "") << ": " << m;
  // What the dashboard is for (issue 13): kept vs seen, probability, loss and quota drops,
  // forwarder queue and spool, call rates from adjusted counts, the broker.
  for (const char* want : {"mcp_events_seen_total", "mcp_events_kept_total", "mcp_sampling_probability",
                           "mcp_events_lost_total", "mcp_quota_drops_total", "mcp_forward_dropped_events_total",
                           "mcp_forward_queue_depth", "mcp_spool_bytes", "mcp_broker_adjusted_count_total",
                           "mcp_broker_error_adjusted_count_total",
                           "mcp_broker_batches_total", "mcp_broker_subscriber_dropped_packets_total",
                           "mcp_broker_otlp_exported_total"})
    EXPECT_TRUE(used.count(want)) << "no panel shows " << want;
}

TEST(GrafanaDashboard, KustomizationShipsItAsAConfigMapGrafanaLoads) {
  const auto k = YAML::LoadFile((source_dir() / "packaging/grafana/kustomization.yaml").string());
  EXPECT_EQ(k["generatorOptions"]["labels"]["grafana_dashboard"].as<std::string>(""), "1");
  bool shipped = false;
  for (const auto& g : k["configMapGenerator"]) {
    EXPECT_EQ(g["namespace"].as<std::string>(""), "mcp-system");
    for (const auto& f : g["files"]) shipped |= f.as<std::string>() == "mcp-sampling.json";
  }
  EXPECT_TRUE(shipped) << "configMapGenerator does not ship mcp-sampling.json";
  const auto top = YAML::LoadFile((source_dir() / "packaging/k8s/kustomization.yaml").string());
  bool included = false;
  for (const auto& r : top["resources"]) included |= r.as<std::string>() == "../grafana";
  EXPECT_TRUE(included) << "packaging/k8s/kustomization.yaml does not include ../grafana";
  EXPECT_NE(slurp(source_dir() / "docs/metrics.md").find("packaging/grafana/mcp-sampling.json"), std::string::npos);

  if (!have_tool("kubectl")) return;  // the rendering below is a bonus where kubectl exists
  const auto r = run_shell("kubectl kustomize " + (source_dir() / "packaging/grafana").string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto cm = YAML::Load(r.out.substr(0, r.out.rfind('\n') + 1));
  EXPECT_EQ(cm["kind"].as<std::string>(""), "ConfigMap");
  EXPECT_EQ(cm["metadata"]["labels"]["grafana_dashboard"].as<std::string>(""), "1");
  EXPECT_EQ(cm["data"]["mcp-sampling.json"].as<std::string>(""), slurp(kDashboard));
}

}  // namespace
}  // namespace mcp::packaging_test
