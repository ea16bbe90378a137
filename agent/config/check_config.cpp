#include "config/check_config.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "config/loader.h"

namespace mcp::config {

int run_check_config(const std::string& file, std::ostream& out, std::ostream& err) {
  try {
    const Config cfg = load_config(file);
    out << file << ": ok (" << cfg.probes.size() << " probes, " << cfg.services.size() << " service strategies, "
        << cfg.compliance.rules->size() << " compliance rules)\n";
    return 0;
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) err << d.str() << "\n";
    return static_cast<int>(ExitCode::kUsage);
  }
}

}  // namespace mcp::config

namespace mcp {

void add_check_config_command(CLI::App& app, CommandAction& action) {
  auto* cmd = app.add_subcommand("check-config", "Validate an agent.yaml; print FILE:LINE:COL: reason for each problem");
  auto file = std::make_shared<std::string>();
  cmd->add_option("FILE", *file, "agent.yaml to check")->required();
  cmd->callback([&action, file] {
    action = [file] { return config::run_check_config(*file, std::cout, std::cerr); };
  });
}

}  // namespace mcp
