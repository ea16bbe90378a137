#include "common/fd_limit.h"

#include <sys/resource.h>

namespace mcp {

namespace {
rlimit g_started_with{};
bool g_raised = false;
}  // namespace

void raise_fd_limit() {
  rlimit l;
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur >= l.rlim_max) return;
  g_started_with = l;
  l.rlim_cur = l.rlim_max;
  g_raised = setrlimit(RLIMIT_NOFILE, &l) == 0;
}

void restore_fd_limit() {
  if (g_raised) setrlimit(RLIMIT_NOFILE, &g_started_with);
}

}  // namespace mcp
