// Errors crossing a library boundary: one exception type carrying the exit code
// main() returns (2 usage, 1 runtime) and a one-line message for stderr.
#pragma once
#include <stdexcept>
#include <string>

namespace mcp {

enum class ExitCode : int { kOk = 0, kRuntime = 1, kUsage = 2 };

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

inline Error usage_error(const std::string& what) { return Error(ExitCode::kUsage, what); }
inline Error runtime_error(const std::string& what) { return Error(ExitCode::kRuntime, what); }

}  // namespace mcp
