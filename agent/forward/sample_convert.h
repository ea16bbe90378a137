// Conversion of a decoded mcp::Event into the wire Sample (every field of the JSON event).
// This is the one place events become protobuf strings: each is repaired to valid UTF-8
// (common/utf8.h), as the JSON encoder does, so no traced process can poison a batch.
// Only gRPC-facing libraries include this; it pulls in the generated protobuf header.
#pragma once
#include "common/event.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp {

void to_sample(const Event& event, mcp::v1::Sample* out);

// Adjusted count of a sample: 2^64 / threshold (1 when threshold is UINT64_MAX or 0 is unset).
double sample_weight(const mcp::v1::Sample& sample);

}  // namespace mcp
