// Whether a configuration file may be trusted: the agent runs as root and a write to its
// configuration is applied live, so only root (or the agent's own user) may be able to change
// it. Refused, with one reason, when the file or a directory it is reached through (the
// directory holding the path as given, which the reloader watches, and the one holding the
// file it resolves to) is
//   - writable by group or others (a directory with the sticky bit, like /tmp, is allowed:
//     others cannot replace files in it), or
//   - owned by a user other than root or the agent's effective user.
// Files on a read-only mount (a Kubernetes ConfigMap volume) cannot be written and pass.
#pragma once
#include <filesystem>
#include <string>

namespace mcp::config {

// Empty when `path` may be loaded, else why not ("writable by group/other (mode 0666)...").
std::string untrusted_reason(const std::filesystem::path& path);

}  // namespace mcp::config
