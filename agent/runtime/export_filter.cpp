#include "runtime/export_filter.h"

#include <algorithm>

#include "audit/audit_log.h"
#include "common/call_error.h"
#include "common/mix64.h"

namespace mcp::runtime {

bool ExportFilter::keep(const ExportFilterSpec& spec, Event& e) {
  double rate = spec.sample_rate;
  if (spec.rules && !spec.rules->empty()) {
    rules::apply(*spec.rules, e, scratch_);
    // Fail closed: an event whose decision could not be recorded does not leave the node.
    if (audit_ && scratch_.any() && !audit_->record(*spec.rules, scratch_, e)) return false;
    if (scratch_.drop) return false;
    if (scratch_.exempt) return true;
    if (scratch_.rate) rate = std::min(rate, *scratch_.rate);
  }
  if (spec.error_only) {
    if (!marks_error(e.kind, e.has_ret, e.ret)) return false;
  }
  if (rate < 1.0) {
    const uint64_t h = mix64(e.ktime_ns ^ (static_cast<uint64_t>(e.tid) << 32) ^ e.probe_id);
    if (h >= probability_to_threshold(rate)) return false;
    e.threshold = probability_to_threshold(threshold_to_probability(e.threshold) * rate);
  }
  return true;
}

}  // namespace mcp::runtime
