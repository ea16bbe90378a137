// Decoder: turns one raw ring-buffer record (bpf/mcp_abi.h layout) into an
// mcp::Event. Records that are too short or of an unknown kind are rejected
// (false) and counted by the caller, never guessed at.
#pragma once
#include <cstddef>
#include <functional>
#include <string_view>

#include "common/event.h"
#include "mcp_abi.h"

namespace mcp::pipeline {

// What the decoder needs to know of a probe: its stable name and how many of the
// six captured arguments are meaningful (a syscall's arity).
struct ProbeRef {
  std::string_view name;
  uint8_t nargs = 6;
  bool args_declared = true;  // false: a uprobe's six registers, its count unknown (Event)
};
using ProbeNameLookup = std::function<ProbeRef(uint32_t probe_id)>;

bool decode_record(const void* data, size_t size, const ProbeNameLookup& names, Event& out);

// The API-specific part of a CUDA record (geometry, bytes, stream...). The
// kernel name and api string are filled later, by the CUDA symboliser.
bool decode_cuda(const mcp_cuda_event& record, CudaInfo& out);
// The same for a launch reported at its entry (MCP_KIND_CUDA_LAUNCH); false for an
// API that is not a launch (only launches are reported that way).
bool decode_cuda_launch(const mcp_cuda_launch_event& record, CudaInfo& out);
// A launch as the application made it (runtime, driver or graph launch API): CudaInfo::launch.
bool is_launch_api(uint32_t api);

}  // namespace mcp::pipeline
