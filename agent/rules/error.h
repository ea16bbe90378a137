// RulesError: a compliance rules source that does not lex, parse or type-check.
// Carries the 1-based line and column of the offending token; what() reads
// "LINE:COL: reason" so callers can prefix a file name.
#pragma once
#include <cstdint>
#include <string>

#include "common/error.h"

namespace mcp::rules {

struct SourcePos {
  uint32_t line = 1;
  uint32_t column = 1;
  bool operator==(const SourcePos&) const = default;
};

class RulesError : public mcp::Error {
 public:
  RulesError(SourcePos pos, const std::string& reason)
      : mcp::Error(ExitCode::kUsage,
                   std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " + reason),
        pos_(pos), reason_(reason) {}
  SourcePos pos() const { return pos_; }
  const std::string& reason() const { return reason_; }

 private:
  SourcePos pos_;
  std::string reason_;
};

}  // namespace mcp::rules
