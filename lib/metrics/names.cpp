#include "metrics/names.h"

namespace mcp::metrics {

std::string metrics_markdown_table(std::span<const MetricSpec> specs) {
  std::string out = "| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n";
  for (const auto& m : specs) {
    out += "| `" + std::string(m.name) + "` | ";
    out += m.type == MetricType::kCounter ? "counter" : "gauge";
    std::string labels(m.label);
    for (size_t c = labels.find(','); c != std::string::npos; c = labels.find(',', c + 4)) labels.replace(c, 1, "`, `");
    out += " | " + (labels.empty() ? std::string("") : "`" + labels + "`");
    out += " | " + std::string(m.help) + " |\n";
  }
  return out;
}

}  // namespace mcp::metrics
