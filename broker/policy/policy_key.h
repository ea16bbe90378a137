// A sampling policy's identity at the broker: (service, probe, trace_id_prefix). A policy
// pushed with the key of a stored one replaces it; a prefix rule is its own policy beside the
// one of its (service, probe), as the agents keep them (runtime/control_loop.h ProbePolicy).
#pragma once
#include <compare>
#include <string>

namespace mcp::broker {

struct PolicyKey {
  std::string service, probe, trace_id_prefix;
  auto operator<=>(const PolicyKey&) const = default;
};

}  // namespace mcp::broker
