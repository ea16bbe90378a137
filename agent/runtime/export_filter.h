// ExportFilter: the exporter step between enrichment and the sinks, the same for
// `trace` and `run`: compliance rules (drop, exempt, redact, rate), error_only and
// the exporter's own sample rate. A sampled-in event's threshold is lowered to match,
// so its weight stays the true adjusted count. The verdict on sampling is a hash of
// the event's identity, so a replayed event gets the same one.
#pragma once
#include <memory>

#include "common/event.h"
#include "rules/ruleset.h"

namespace mcp::audit {
class AuditLog;
}

namespace mcp::runtime {

struct ExportFilterSpec {
  std::shared_ptr<const rules::RuleSet> rules;  // null or empty: no compliance step
  bool error_only = false;                      // keep only events whose return marks an error
  double sample_rate = 1.0;                     // (0, 1]
  bool operator==(const ExportFilterSpec&) const = default;
  bool passes_all() const { return (!rules || rules->empty()) && !error_only && sample_rate >= 1.0; }
};

class ExportFilter {
 public:
  // Returns false to drop `e`; may redact fields and lower e.threshold. Not thread-safe
  // (one scratch decision per filter): one per consumer thread.
  bool keep(const ExportFilterSpec& spec, Event& e);
  // Every rule decision that exempts, redacts or names clauses is recorded there first (the
  // record is written before the event can reach a sink); an event whose record cannot be
  // written is dropped (the log counts it); null: none.
  void set_audit(audit::AuditLog* log) { audit_ = log; }

 private:
  rules::Decision scratch_;
  audit::AuditLog* audit_ = nullptr;
};

}  // namespace mcp::runtime
