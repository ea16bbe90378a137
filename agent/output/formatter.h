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

// `probe` in at most `width` columns (code points), shortened the same way for every probe:
// the directories give way first ("…/binary:symbol", so one binary's probes read alike), then
// the symbol's end ("…/binary:sym…"). Names that fit, and syscalls, are kept whole.
std::string short_probe_name(std::string_view probe, size_t width);

// Appends s as a JSON string literal (quotes and escapes included).
void append_json_string(std::string& out, std::string_view s);

}  // namespace mcp::output
