// mcp-agent: wires the subcommands; each file of agent/commands/ registers its own (common/command.h).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <cstdio>

#include "commands/audit.h"
#include "commands/trace.h"
#include "common/command.h"
#include "common/error.h"
#include "common/fd_limit.h"
#include "commands/check_config.h"
#include "commands/run.h"
#include "commands/policy.h"
#include "commands/subscribe.h"

int main(int argc, char** argv) {
  mcp::raise_fd_limit();
  // stdout carries events; every log line goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("mcp-agent"));
  CLI::App app{"mcp-agent: sampled eBPF tracing of user functions, syscalls and CUDA launches"};
  app.require_subcommand(1);
  mcp::CommandAction action;
  mcp::commands::add_version_command(app, action);
  mcp::commands::add_trace_command(app, action);
  mcp::commands::add_subscribe_command(app, action);
  mcp::commands::add_policy_command(app, action);
  mcp::commands::add_run_command(app, action);
  mcp::commands::add_check_config_command(app, action);
  mcp::commands::add_audit_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mcp-agent: %s (see --help)\n", e.what());
    return static_cast<int>(mcp::ExitCode::kUsage);
  }
  try {
    return action ? action() : 0;
  } catch (const mcp::Error& e) {
    std::fprintf(stderr, "mcp-agent: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mcp-agent: %s\n", e.what());
    return static_cast<int>(mcp::ExitCode::kRuntime);
  }
}
