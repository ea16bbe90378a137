// Convention for mcp-agent subcommands: each library that owns a subcommand exposes
//   void add_<name>_command(CLI::App& app, mcp::CommandAction& action);
// which registers the subcommand and its flags; when CLI11 selects it, its callback
// stores the runner in `action`. main() parses, then runs `action` once, mapping
// mcp::Error to a one-line message and its exit code.
#pragma once
#include <functional>

namespace mcp {
using CommandAction = std::function<int()>;
}
