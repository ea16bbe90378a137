#include "runtime/readiness.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "common/error.h"
#include "common/safe_file.h"

namespace mcp::runtime {

void announce_ready(size_t probes, const std::string& ready_file) {
  const std::string line = std::string(kReadyPrefix) + std::to_string(probes) + " probes attached\n";
  if (!ready_file.empty()) {
    // Root writes it, often in a shared directory: a temporary name nobody can plant a link at
    // in advance, renamed over the name (common/safe_file.h). 0644: supervisors read it.
    const std::filesystem::path path(ready_file);
    const SafeDir dir(path.has_parent_path() ? path.parent_path() : ".", "ready file");
    if (!dir.replace(path.filename(), line, 0644))
      throw runtime_error("cannot write the ready file " + ready_file + ": " + open_error_text(errno));
  }
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace mcp::runtime
