// Decoder: turns one raw ring-buffer record (bpf/mcp_abi.h layout) into an
// mcp::Event. Records that are too short or of an unknown kind are rejected
// (false) and counted by the caller, never guessed at.
#pragma once
#include <cstddef>
#include <functional>
#include <string_view>

#include "common/event.h"

namespace mcp::pipeline {

using ProbeNameLookup = std::function<std::string_view(uint32_t probe_id)>;

bool decode_record(const void* data, size_t size, const ProbeNameLookup& names, Event& out);

}  // namespace mcp::pipeline
