#include "fuzz_targets.h"

#include <cstring>
#include <string_view>

#include "config/loader.h"
#include "rules/ruleset.h"

namespace mcp::fuzz {

namespace {
Event fixed_event() {
  Event e;
  e.probe = "/usr/bin/app:handle";
  e.pid = 42;
  e.nargs = 3;
  e.args = {1, 2, 3, 0, 0, 0};
  e.has_ret = true;
  e.ret = -1;
  std::memcpy(e.comm.data(), "app", 3);
  e.service = "checkout";
  e.tags = {{"version", "v1"}};
  e.attributes = {{"field.category", "biometric"}, {"amount", "12.5"}, {"consent.granted", "true"}};
  return e;
}
}  // namespace

int rules_one_input(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto rs = rules::RuleSet::compile(text);
    Event e = fixed_event();
    rules::Decision d;
    rs.evaluate(e, d);
    rules::apply(rs, e, d);
    (void)rules::audit_record(rs, d, e);
  } catch (const rules::RulesError&) {
  }
  return 0;
}

int config_one_input(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cfg = config::parse_config(text, "fuzz.yaml");
    for (const auto& s : cfg.services) (void)cfg.version_targets(s.service);
  } catch (const config::ConfigError&) {
  }
  return 0;
}

}  // namespace mcp::fuzz
