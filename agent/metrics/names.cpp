#include "metrics/names.h"

namespace mcp::metrics {

std::string metrics_markdown_table() {
  std::string out = "| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n";
  for (const auto& m : kAgentMetrics) {
    out += "| `" + std::string(m.name) + "` | ";
    out += m.type == MetricType::kCounter ? "counter" : "gauge";
    out += " | " + (m.label.empty() ? std::string("") : "`" + std::string(m.label) + "`");
    out += " | " + std::string(m.help) + " |\n";
  }
  return out;
}

}  // namespace mcp::metrics
