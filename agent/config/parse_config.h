// Reading agent.yaml: parse_config() turns YAML text into a validated Config or throws
// ConfigError listing every problem as FILE:LINE:COL: reason (1-based). Unknown keys are
// errors (with a suggestion for likely typos), so a misspelt option never passes silently.
// Compliance rules given inline are compiled here and their errors mapped back to the YAML
// line and column; rules given as a file are reported against that file.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "config/config.h"

namespace mcp::config {

struct Diagnostic {
  std::string file;
  int line = 0;    // 1-based; 0 when the problem is the file as a whole
  int column = 0;  // 1-based
  std::string message;
  // "FILE:LINE:COL: message", or "FILE: message" when line is 0.
  std::string str() const;
};

// A rejected configuration. what() is the first diagnostic; exit code 2 (usage).
class ConfigError : public mcp::Error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// `file` names the source in diagnostics and Config::path; relative compliance rule files
// are resolved against `base_dir`.
Config parse_config(std::string_view yaml, const std::string& file,
                    const std::filesystem::path& base_dir = {});

// Reads `path` (following symlinks, as a kubelet-mounted ConfigMap needs) and parses it;
// relative rule files resolve against the config file's directory. A file others can change
// is refused first (file_trust.h), as a ConfigError.
Config load_config(const std::filesystem::path& path);

}  // namespace mcp::config
