// `mcp-agent run --config FILE`: the long-running node agent. Loads and
// validates the configuration, attaches its probes, drops to the capabilities
// it still needs, then streams kept events to the broker (or stdout) while
// serving /healthz and /metrics. The configuration hot-reloads on file changes
// (kubelet ConfigMap swaps included) and SIGHUP; SIGTERM flushes and exits 0.
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"

namespace mcp::commands {

void add_run_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::commands
