// JSON and table rendering of a wire Sample, with the field names of the agent's JSON events
// (ts_ns, ktime_ns, hlc, kind, probe, pid, tid, comm, cgroup_id, cpu, args, ret, duration_ns,
// weight, service, tags, cuda{...}); ret / duration_ns / cuda appear only when the event has them.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "mcp/v1/sampling.pb.h"

namespace mcp {

nlohmann::json sample_to_json(const mcp::v1::Sample& sample);
std::string table_header();
std::string sample_to_table_row(const mcp::v1::Sample& sample);

}  // namespace mcp
