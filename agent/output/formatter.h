// Formatter: renders events for people and programs. One interface, one class
// per format; callers never branch on the format. Output is appended to a
// caller-owned buffer so the hot path allocates nothing per event.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "common/event.h"

namespace mcp::output {

class Formatter {
 public:
  virtual ~Formatter() = default;
  // Written once before the first event (column titles for tables).
  virtual void header(std::string& out) const { (void)out; }
  virtual void format(const Event& event, std::string& out) const = 0;
};

// "json" (one object per line) or "table"; throws a usage error for others.
std::unique_ptr<Formatter> make_formatter(std::string_view name);

// Appends s as a JSON string literal (quotes and escapes included).
void append_json_string(std::string& out, std::string_view s);

}  // namespace mcp::output
