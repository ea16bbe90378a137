#include "otlp/sample_metrics.h"

#include "common/call_error.h"
#include "common/event.h"
#include "common/utf8.h"
#include "otlp/mapping.h"
#include "wire/block_check.h"

namespace mcp::otlp {
namespace {

namespace metrics = opentelemetry::proto::metrics::v1;

metrics::Sum* cumulative_sum(metrics::ScopeMetrics* scope, const char* name, const char* unit,
                             const char* description) {
  auto* m = scope->add_metrics();
  m->set_name(name);
  m->set_unit(unit);
  m->set_description(description);
  auto* sum = m->mutable_sum();
  sum->set_aggregation_temporality(metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  sum->set_is_monotonic(true);
  return sum;
}

}  // namespace

void SampleMetrics::add_block(const mcp::v1::EventBlock& block) {
  // Summed per dictionary index first: the strings are looked up once per block, not per event.
  std::map<std::pair<uint32_t, uint32_t>, Totals> by_index;
  for (const auto& e : block.events()) {
    Totals& t = by_index[{e.service(), e.probe()}];
    const double weight = 1.0 / threshold_to_probability(e.threshold() == 0 ? 1 : e.threshold());
    t.calls += weight;
    if (marks_error(e)) t.errors += weight;
    ++t.events;
  }
  std::lock_guard lock(mu_);
  for (const auto& [key, t] : by_index) {
    Totals& total = totals_[{valid_utf8(wire::block_string(block, key.first)), valid_utf8(wire::block_string(block, key.second))}];
    total.calls += t.calls;
    total.errors += t.errors;
    total.events += t.events;
  }
}

std::map<std::pair<std::string, std::string>, SampleMetrics::Totals> SampleMetrics::snapshot() const {
  std::lock_guard lock(mu_);
  return totals_;
}

bool SampleMetrics::append_to(
    opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest* out,
    uint64_t now_unix_ns) const {
  const auto totals = snapshot();
  if (totals.empty()) return false;
  std::map<std::string, std::vector<std::pair<std::string, Totals>>> by_service;
  for (const auto& [key, t] : totals) by_service[key.first].emplace_back(key.second, t);
  for (const auto& [service, probes] : by_service) {
    auto* rm = out->add_resource_metrics();
    auto* attr = rm->mutable_resource()->add_attributes();
    attr->set_key("service.name");
    attr->mutable_value()->set_string_value(service.empty() ? "unknown_service" : service);
    auto* scope = rm->add_scope_metrics();
    scope->mutable_scope()->set_name(std::string(kScopeName));
    auto* calls = cumulative_sum(scope, "mcp.calls.estimated", "{call}",
                                 "Calls estimated from sampled events (sum of adjusted counts)");
    auto* errors = cumulative_sum(scope, "mcp.errors.estimated", "{call}",
                                  "Failed calls estimated from sampled events (sum of adjusted counts)");
    auto* events = cumulative_sum(scope, "mcp.events.sampled", "{event}", "Kept events received");
    for (const auto& [probe, t] : probes) {
      auto point = [&](metrics::Sum* sum) {
        auto* p = sum->add_data_points();
        p->set_start_time_unix_nano(start_unix_ns_);
        p->set_time_unix_nano(now_unix_ns);
        auto* a = p->add_attributes();
        a->set_key("mcp.probe");
        a->mutable_value()->set_string_value(probe);
        return p;
      };
      point(calls)->set_as_double(t.calls);
      point(errors)->set_as_double(t.errors);
      point(events)->set_as_int(static_cast<int64_t>(t.events));
    }
  }
  return true;
}

}  // namespace mcp::otlp
