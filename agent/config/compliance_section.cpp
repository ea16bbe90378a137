// agent.yaml's `compliance:`: rules inline (errors mapped back to the YAML line and column)
// or from a file (errors reported against that file).
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/duration.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "rules/ruleset.h"

namespace mcp::config {

using yaml::Ctx;
using yaml::MapReader;
using yaml::pos_of;
using yaml::read_file;
using yaml::read_integer;
using yaml::read_string;

namespace {

// Where rule source line/column land in the YAML file, for an inline `rules:` scalar.
Position map_inline_rules_pos(std::string_view text, const YAML::Node& scalar, rules::SourcePos rp) {
  const Position start = pos_of(scalar.Mark());
  if (start.line == 0) return {};
  // Split the file into lines to look at the scalar's indicator and indentation.
  std::vector<std::string_view> lines;
  size_t b = 0;
  while (b <= text.size()) {
    const size_t e = text.find('\n', b);
    lines.push_back(text.substr(b, (e == std::string_view::npos ? text.size() : e) - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  const std::string_view first = lines[start.line - 1];
  const char indicator = static_cast<size_t>(start.column - 1) < first.size() ? first[start.column - 1] : '\0';
  if (indicator == '|' || indicator == '>') {
    int indent = 0;
    for (size_t l = start.line; l < lines.size(); ++l) {  // first non-blank content line
      const auto nb = lines[l].find_first_not_of(' ');
      if (nb != std::string_view::npos) {
        indent = static_cast<int>(nb);
        break;
      }
    }
    return {start.line + static_cast<int>(rp.line), indent + static_cast<int>(rp.column)};
  }
  const int quote = (indicator == '"' || indicator == '\'') ? 1 : 0;
  if (rp.line == 1) return {start.line, start.column + quote + static_cast<int>(rp.column) - 1};
  return {start.line + static_cast<int>(rp.line) - 1, static_cast<int>(rp.column)};
}

}  // namespace

namespace {

// compliance.audit_log: {dir, max_bytes, max_age, key, max_files, seal_every}; dir is required.
void read_audit_log(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, ComplianceConfig& out) {
  MapReader m(ctx, n, "compliance.audit_log", {"dir", "max_bytes", "max_age", "key", "max_files", "seal_every"});
  if (!m.valid()) return;
  AuditLogConfig a;
  if (!m.has("dir")) {
    ctx.error(n, "compliance.audit_log needs 'dir'");
    return;
  }
  if (auto d = read_string(ctx, m.get("dir"), "compliance.audit_log.dir")) {
    std::filesystem::path p(*d);
    if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
    a.dir = p.string();
  }
  if (m.has("key")) {
    if (auto k = read_string(ctx, m.get("key"), "compliance.audit_log.key")) {
      std::filesystem::path p(*k);
      if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
      a.key = p.string();
    }
  }
  if (m.has("max_files")) {
    if (auto f = read_integer(ctx, m.get("max_files"), "compliance.audit_log.max_files")) {
      if (*f < 0 || *f > 1000000) ctx.error(m.get("max_files"), "compliance.audit_log.max_files must be 0 (keep all) to 1000000");
      else a.max_files = static_cast<uint32_t>(*f);
    }
  }
  if (m.has("seal_every")) {
    if (auto e = read_integer(ctx, m.get("seal_every"), "compliance.audit_log.seal_every")) {
      if (*e < 1 || *e > 1000000) ctx.error(m.get("seal_every"), "compliance.audit_log.seal_every must be 1 to 1000000");
      else a.seal_every = static_cast<uint32_t>(*e);
    }
  }
  if (m.has("max_bytes")) {
    if (auto b = read_integer(ctx, m.get("max_bytes"), "compliance.audit_log.max_bytes")) {
      if (*b < 4096) ctx.error(m.get("max_bytes"), "compliance.audit_log.max_bytes must be at least 4096");
      else a.max_bytes = static_cast<uint64_t>(*b);
    }
  }
  if (m.has("max_age")) {
    if (auto s = read_string(ctx, m.get("max_age"), "compliance.audit_log.max_age")) {
      try {
        a.max_age = std::chrono::duration_cast<std::chrono::seconds>(mcp::parse_duration(*s));
        if (a.max_age.count() < 1) ctx.error(m.get("max_age"), "compliance.audit_log.max_age must be at least 1s");
      } catch (const mcp::Error& e) {
        ctx.error(m.get("max_age"), std::string("compliance.audit_log.max_age: ") + e.what());
      }
    }
  }
  out.audit_log = a;
}

}  // namespace

void read_compliance(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, ComplianceConfig& out) {
  MapReader m(ctx, n, "compliance", {"rules", "file", "audit_log"});
  if (!m.valid()) return;
  if (m.has("audit_log")) read_audit_log(ctx, m.get("audit_log"), base_dir, out);
  if (m.has("rules") && m.has("file")) {
    ctx.error(m.key_node("file"), "compliance takes either 'rules' (inline) or 'file', not both");
    return;
  }
  if (m.has("rules")) {
    const YAML::Node r = m.get("rules");
    auto src = read_string(ctx, r, "compliance.rules", true);
    if (!src) return;
    out.source = *src;
    try {
      out.rules = std::make_shared<const rules::RuleSet>(rules::RuleSet::compile(out.source));
    } catch (const rules::RulesError& e) {
      ctx.error(map_inline_rules_pos(ctx.text(), r, e.pos()), "compliance rule: " + e.reason());
    }
  } else if (m.has("file")) {
    const YAML::Node f = m.get("file");
    auto name = read_string(ctx, f, "compliance.file");
    if (!name) return;
    std::filesystem::path p(*name);
    if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
    std::string err;
    out.source = read_file(p, err);
    out.file = p.string();
    if (!err.empty()) {
      ctx.error(f, "compliance.file '" + p.string() + "': " + err);
      return;
    }
    try {
      out.rules = std::make_shared<const rules::RuleSet>(rules::RuleSet::compile(out.source));
    } catch (const rules::RulesError& e) {
      ctx.error_in(p.string(), {static_cast<int>(e.pos().line), static_cast<int>(e.pos().column)}, e.reason());
    }
  }
}

}  // namespace mcp::config
