// The schema walker every agent.yaml section is read with; internal to mcp_config.
// Contract: every mapping is read through MapReader, which rejects unknown keys (suggesting
// the likely one for a typo) and duplicate keys; every scalar through the typed readers,
// which reject quoted numbers and booleans ("80" is not 80). Problems are collected in Ctx,
// not thrown one by one, so an operator sees all of them in one run.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/parse_config.h"

namespace mcp::config::yaml {

size_t edit_distance(std::string_view a, std::string_view b);

inline Position pos_of(const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

class Ctx {
 public:
  Ctx(std::string file, std::string_view text) : file_(std::move(file)), text_(text) {}

  void error(Position p, std::string msg) { diags_.push_back({file_, p.line, p.column, std::move(msg)}); }
  void error(const YAML::Node& n, std::string msg) { error(pos_of(n.Mark()), std::move(msg)); }
  void error_in(const std::string& file, Position p, std::string msg) {
    diags_.push_back({file, p.line, p.column, std::move(msg)});
  }
  bool ok() const { return diags_.empty(); }
  std::vector<Diagnostic>& diagnostics() { return diags_; }
  const std::string& file() const { return file_; }
  std::string_view text() const { return text_; }
  // Where a `pod:` or `namespace:` was read: these need the pod watch (checked at the end).
  std::vector<std::pair<Position, std::string>> pod_refs;

 private:
  std::string file_;
  std::string_view text_;
  std::vector<Diagnostic> diags_;
};

// "a mapping", "a list", "a scalar" or "nothing", for "found ..." in messages.
const char* kind_name(const YAML::Node& n);

// Reads one mapping, checking its keys against the schema.
class MapReader {
 public:
  MapReader(Ctx& ctx, const YAML::Node& node, std::string_view what,
            std::initializer_list<std::string_view> allowed);

  bool valid() const { return valid_; }
  bool has(const std::string& key) const { return entries_.count(key) > 0; }
  YAML::Node get(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? YAML::Node() : it->second.second;
  }
  YAML::Node key_node(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? node_ : it->second.first;
  }
  const YAML::Node& node() const { return node_; }

 private:
  YAML::Node node_;
  bool valid_ = true;
  std::map<std::string, std::pair<YAML::Node, YAML::Node>> entries_;
};

inline bool is_plain(const YAML::Node& n) { return n.Tag() != "!"; }

std::optional<std::string> read_string(Ctx& ctx, const YAML::Node& n, std::string_view what, bool allow_empty = false);
std::optional<bool> read_bool(Ctx& ctx, const YAML::Node& n, std::string_view what);
std::optional<double> read_number(Ctx& ctx, const YAML::Node& n, std::string_view what);
std::optional<long long> read_integer(Ctx& ctx, const YAML::Node& n, std::string_view what);
std::vector<std::string> read_string_list(Ctx& ctx, const YAML::Node& n, std::string_view what);

// host:port with a numeric port; gRPC URIs (dns:///, unix:) pass through.
bool valid_endpoint(std::string_view s, bool allow_uri, bool allow_port_zero);

// The whole file; on failure `error` says why and the result is empty.
std::string read_file(const std::filesystem::path& p, std::string& error);

// agent.yaml is one document: where and why `yaml` is not (a syntax error yaml-cpp would
// loop on, or a second document), else nothing.
std::optional<std::pair<Position, std::string>> check_single_document(std::string_view yaml);

}  // namespace mcp::config::yaml
