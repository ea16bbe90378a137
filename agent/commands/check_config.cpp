#include "commands/check_config.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "config/parse_config.h"
#include "loader/elf_symbols.h"
#include "loader/target_resolver.h"

namespace mcp::commands {
using namespace mcp::config;  // the config library this command fronts

int run_check_config(const std::string& file, std::ostream& out, std::ostream& err) {
  try {
    const Config cfg = load_config(file);
    // The targets, judged as `mcp-agent run` judges them: a file that is not there yet is a
    // waiting probe (a warning), a file that cannot be a target is an error.
    std::vector<Diagnostic> errors;
    int warnings = 0;
    for (const auto& p : cfg.probes) {
      if (p.kind == ProbeKind::kSyscall) continue;
      if (p.container) continue;  // a path inside containers: nothing to look at on the host
      const auto found = loader::find_binary(p.target, 0);
      if (!found) {
        err << Diagnostic{file, p.pos.line, p.pos.column,
                          "warning: " + p.target + " not found on this host; the probe will wait for it"}
                   .str()
            << "\n";
        warnings++;
        continue;
      }
      try {
        if (p.kind == ProbeKind::kCuda) loader::ElfSymbols::load(*found);
        else loader::probe_target_in(*found, p.symbol, p.kind == ProbeKind::kUsdt);
      } catch (const std::exception& e) {
        errors.push_back({file, p.pos.line, p.pos.column, e.what()});
      }
    }
    if (!errors.empty()) throw ConfigError(std::move(errors));
    out << file << ": ok (" << cfg.probes.size() << " probes, " << cfg.services.size() << " service strategies, "
        << cfg.compliance.rules->size() << " compliance rules" << (warnings ? ", " + std::to_string(warnings) + " waiting" : "")
        << ")\n";
    return 0;
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) err << d.str() << "\n";
    return static_cast<int>(ExitCode::kUsage);
  }
}

void add_check_config_command(CLI::App& app, CommandAction& action) {
  auto* cmd = app.add_subcommand("check-config", "Validate an agent.yaml; print FILE:LINE:COL: reason for each problem");
  auto file = std::make_shared<std::string>();
  cmd->add_option("FILE", *file, "agent.yaml to check")->required();
  cmd->callback([&action, file] {
    action = [file] { return run_check_config(*file, std::cout, std::cerr); };
  });
}

}  // namespace mcp::commands
