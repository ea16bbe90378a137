// `mcp-agent policy apply|list --broker ADDR`: set or show the sampling
// policies a broker stores and pushes to its agents (service/probe -> rate or
// target QPS). Registers per common/command.h.
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"

namespace mcp::commands {

void add_policy_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::commands
