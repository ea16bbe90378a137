// Event kinds on the wire: the one table between mcp::EventKind, the proto's EventKind enum
// (compact events) and a kind's name (v1 Samples, OTLP's mcp.event.kind, JSON). Names are
// mcp::to_string(EventKind) (common/event.h), so the JSON output and the wire spell them alike.
// An unknown wire kind or name has no EventKind: callers choose what it reads as.
#pragma once
#include <optional>
#include <string_view>

#include "common/event.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::wire {

mcp::v1::EventKind kind_to_wire(EventKind kind);
std::optional<EventKind> kind_from_wire(int kind);
std::optional<EventKind> kind_from_name(std::string_view name);
// The wire kind's name ("uprobe", "syscall", ...); "" for an unknown kind.
std::string_view kind_name(int kind);

}  // namespace mcp::wire
