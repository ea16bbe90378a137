// The one rule for "this call failed", shared by error_only export filters and OTLP (span
// status, log severity, estimated error counts): a CUDA call returning non-zero (cudaError_t /
// CUresult), any other function or syscall returning < 0 (-errno, or a C convention).
#pragma once
#include <cstdint>

#include "common/event.h"

namespace mcp {

inline bool marks_error(EventKind kind, bool has_ret, int64_t ret) {
  return has_ret && (kind == EventKind::kCuda ? ret != 0 : ret < 0);
}

}  // namespace mcp
