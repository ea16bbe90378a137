// `mcp-agent check-config FILE`: validates an agent.yaml without starting anything.
// Exit 0 and a one-line summary on stdout when valid; exit 2 with one
// `FILE:LINE:COL: reason` line per problem on stderr when not.
#pragma once
#include <iosfwd>
#include <string>

#include "common/command.h"

namespace CLI {
class App;
}

namespace mcp::config {

int run_check_config(const std::string& file, std::ostream& out, std::ostream& err);

}  // namespace mcp::config

namespace mcp {
void add_check_config_command(CLI::App& app, CommandAction& action);
}
