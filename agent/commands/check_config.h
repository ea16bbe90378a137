// `mcp-agent check-config FILE`: validates an agent.yaml without starting anything.
// Exit 0 and a one-line summary on stdout when valid; exit 2 with one
// `FILE:LINE:COL: reason` line per problem on stderr when not. Probe targets are judged as
// `mcp-agent run` judges them: a file absent on this host is a `warning:` line on stderr
// (exit 0; the daemon waits for it), a file that is not ELF or lacks the symbol is an error.
#pragma once
#include <iosfwd>
#include <string>

#include "common/command.h"

namespace CLI {
class App;
}

namespace mcp::commands {

int run_check_config(const std::string& file, std::ostream& out, std::ostream& err);
void add_check_config_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::commands
