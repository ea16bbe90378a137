// `mcp-agent audit verify --key KEY [--seal SEAL] DIR|FILE...`: proves an audit trail
// (audit/audit_log.h) whole under its key and seal, or names the first thing wrong (FILE:LINE,
// or the file missing, and why) and exits 1. A directory stands for its audit-*.jsonl files in
// name order; the seal defaults to DIR/audit.seal (for files: the first one's directory's).
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"

namespace mcp::commands {

void add_audit_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::commands
