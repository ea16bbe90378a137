// A whole file as a string, for credentials and small settings files (CA bundles, token and
// header files). Throws mcp::Error (usage) "cannot read WHAT 'PATH'" so a front end reports an
// unreadable file as bad usage.
#pragma once
#include <string>

namespace mcp {

std::string read_text_file(const std::string& path, const char* what);

}  // namespace mcp
