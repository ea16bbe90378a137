// `mcp-agent trace` (one-shot tracing to stdout) and `mcp-agent version`.
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"

namespace mcp::commands {

void add_trace_command(CLI::App& app, CommandAction& action);
void add_version_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::commands
