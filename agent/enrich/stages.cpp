#include "enrich/stages.h"

#include "clock/timestamper.h"
#include "cuda/kernel_symbolizer.h"
#include "symbolize/stack_symbolizer.h"

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

bool StackSymbolStage::enrich(Event& e) {
  symbolizer_.symbolize(e);
  return true;
}

bool ClockStage::enrich(Event& e) {
  clock_.stamp(e);
  return true;
}

}  // namespace mcp::enrich
