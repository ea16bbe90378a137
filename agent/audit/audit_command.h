// `mcp-agent audit verify FILE|DIR...`: proves an audit trail (audit/audit_log.h) unbroken, or
// names its first bad record (FILE:LINE and why) and exits 1. A directory stands for its
// audit-*.jsonl files in name order.
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"

namespace mcp::audit {

void add_audit_command(CLI::App& app, CommandAction& action);

}  // namespace mcp::audit
