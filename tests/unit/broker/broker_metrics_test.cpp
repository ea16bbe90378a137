#include "broker/broker_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/check_names.h>

#include <fstream>
#include <set>
#include <sstream>

#include "metrics/names.h"

namespace mcp::broker {
namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(std::string(MCP_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(BrokerMetrics, EveryNameIsValidUniqueAndApartFromTheAgents) {
  std::set<std::string_view> names;
  for (const auto& spec : metrics::kAgentMetrics) names.insert(spec.name);
  metrics::Registry r;
  for (const auto& spec : kBrokerMetrics) {
    EXPECT_TRUE(prometheus::CheckMetricName(std::string(spec.name))) << spec.name;
    EXPECT_TRUE(spec.name.starts_with("mcp_broker_")) << spec.name;
    EXPECT_TRUE(names.insert(spec.name).second) << "duplicate " << spec.name;
    EXPECT_EQ(spec.type == MetricType::kCounter, spec.name.ends_with("_total")) << spec.name;
    EXPECT_NO_THROW(r.add_collector(spec, [] { return std::vector<metrics::Sample>{}; })) << spec.name;
  }
}

TEST(BrokerMetrics, BothReadmesListExactlyTheseMetrics) {
  const std::string table = metrics::metrics_markdown_table(kBrokerMetrics);
  for (const char* doc : {"docs/metrics.md", "packaging/README.md"}) {
    EXPECT_NE(read_doc(doc).find(table), std::string::npos)
        << "regenerate the broker table in " << doc << " from metrics_markdown_table(kBrokerMetrics):\n"
        << table;
  }
}

}  // namespace
}  // namespace mcp::broker
