// The agent's descriptor limit: raised to the hard limit at start, since a probe attached by
// itself holds a descriptor or two (a perf event, a link) and thousands of probes on a kernel
// without uprobe_multi links pass the usual soft limit of 1024. Programs the agent starts get
// the limit it was started with back: many still use select(), or close every descriptor up
// to the limit.
#pragma once

namespace mcp {

void raise_fd_limit();
// In a forked child before exec: async-signal-safe.
void restore_fd_limit();

}  // namespace mcp
