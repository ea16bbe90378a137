#include "enrich/stages.h"

#include "clock/timestamper.h"
#include "cuda/kernel_symbolizer.h"

namespace mcp::enrich {

bool ProbeLabelStage::enrich(Event& e) {
  const auto meta = labels_.meta(e.probe_id);
  if (!meta) return true;
  if (e.kind == EventKind::kCuda) e.cuda.api = meta->cuda_api;
  if (!meta->service.empty()) e.service = meta->service;
  if (!meta->tags.empty()) e.tags = meta->tags;
  return true;
}

bool CudaSymbolStage::enrich(Event& e) { return symbolizer_.process(e); }

bool ClockStage::enrich(Event& e) {
  clock_.stamp(e);
  return true;
}

}  // namespace mcp::enrich
