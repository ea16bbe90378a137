#include "runtime/readiness.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace mcp::runtime {

void announce_ready(size_t probes, const std::string& ready_file) {
  const std::string line = std::string(kReadyPrefix) + std::to_string(probes) + " probes attached\n";
  if (!ready_file.empty()) {
    const std::string tmp = ready_file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    const bool ok = f && std::fputs(line.c_str(), f) >= 0;
    if (f && std::fclose(f) != 0) f = nullptr;
    if (!ok || !f || std::rename(tmp.c_str(), ready_file.c_str()) != 0)
      throw runtime_error("cannot write the ready file " + ready_file + ": " + std::strerror(errno));
  }
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace mcp::runtime
