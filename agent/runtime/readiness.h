// The runtime's readiness signal, for supervisors and tests to wait on instead of
// sleeping: once every probe is attached and the consumer runs, one line on stderr,
//   mcp-agent: ready: N probes attached
// printed whatever the log level, and, when the caller names a file, the same line
// written to it atomically (a temporary file renamed into place) in a directory nobody else
// can plant links in (common/safe_file.h).
#pragma once
#include <cstddef>
#include <string>

namespace mcp::runtime {

inline constexpr const char* kReadyPrefix = "mcp-agent: ready: ";

// Throws mcp::Error (runtime) when the file cannot be written.
void announce_ready(size_t probes, const std::string& ready_file);

}  // namespace mcp::runtime
