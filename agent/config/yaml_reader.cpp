// The schema walker behind every agent.yaml section (yaml_reader.h).
#include "config/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mcp::config {

std::string Diagnostic::str() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace yaml {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "a scalar";
    default: return "nothing";
  }
}

MapReader::MapReader(Ctx& ctx, const YAML::Node& node, std::string_view what,
                     std::initializer_list<std::string_view> allowed)
    : node_(node) {
  if (!node.IsMap()) {
    ctx.error(node, std::string(what) + " must be a mapping, found " + kind_name(node));
    valid_ = false;
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node k = it->first;  // a copy: it->first refers into a temporary
    if (!k.IsScalar()) {
      ctx.error(k, "keys in " + std::string(what) + " must be plain names");
      continue;
    }
    const std::string key = k.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string msg = "unknown key '" + key + "' in " + std::string(what);
      std::string_view best;
      size_t best_d = 3;
      for (auto a : allowed) {
        const size_t d = edit_distance(key, a);
        if (d < best_d) best_d = d, best = a;
      }
      if (!best.empty()) msg += " (did you mean '" + std::string(best) + "'?)";
      else {
        msg += " (expected one of:";
        for (auto a : allowed) msg += " " + std::string(a);
        msg += ")";
      }
      ctx.error(k, msg);
      continue;
    }
    if (auto prev = entries_.find(key); prev != entries_.end()) {
      ctx.error(k, "duplicate key '" + key + "' (first at line " +
                       std::to_string(pos_of(prev->second.first.Mark()).line) + ")");
      continue;
    }
    entries_.emplace(key, std::make_pair(k, it->second));
  }
}

std::optional<std::string> read_string(Ctx& ctx, const YAML::Node& n, std::string_view what, bool allow_empty) {
  if (!n.IsScalar()) {
    ctx.error(n, std::string(what) + " must be a string, found " + kind_name(n));
    return std::nullopt;
  }
  if (!allow_empty && n.Scalar().empty()) {
    ctx.error(n, std::string(what) + " must not be empty");
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<bool> read_bool(Ctx& ctx, const YAML::Node& n, std::string_view what) {
  if (n.IsScalar() && is_plain(n)) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  ctx.error(n, std::string(what) + " must be true or false" +
                   (n.IsScalar() ? ", found '" + n.Scalar() + "'" : std::string(", found ") + kind_name(n)));
  return std::nullopt;
}

std::optional<double> read_number(Ctx& ctx, const YAML::Node& n, std::string_view what) {
  if (n.IsScalar() && is_plain(n)) {
    const std::string& s = n.Scalar();
    double d = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (!s.empty() && ec == std::errc() && p == s.data() + s.size() && std::isfinite(d)) return d;
  }
  ctx.error(n, std::string(what) + " must be a number" +
                   (n.IsScalar() ? ", found '" + n.Scalar() + "'" : std::string(", found ") + kind_name(n)));
  return std::nullopt;
}

std::optional<long long> read_integer(Ctx& ctx, const YAML::Node& n, std::string_view what) {
  if (n.IsScalar() && is_plain(n)) {
    const std::string& s = n.Scalar();
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!s.empty() && ec == std::errc() && p == s.data() + s.size()) return v;
  }
  ctx.error(n, std::string(what) + " must be an integer" +
                   (n.IsScalar() ? ", found '" + n.Scalar() + "'" : std::string(", found ") + kind_name(n)));
  return std::nullopt;
}

std::vector<std::string> read_string_list(Ctx& ctx, const YAML::Node& n, std::string_view what) {
  std::vector<std::string> out;
  if (!n.IsSequence()) {
    ctx.error(n, std::string(what) + " must be a list, found " + kind_name(n));
    return out;
  }
  for (const auto& item : n)
    if (auto s = read_string(ctx, item, std::string(what) + " entries")) out.push_back(*s);
  return out;
}

// host:port with a numeric port; gRPC URIs (dns:///, unix:) pass through.
bool valid_endpoint(std::string_view s, bool allow_uri, bool allow_port_zero) {
  if (allow_uri && (s.find("://") != std::string_view::npos || s.starts_with("unix:"))) return true;
  const auto colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = s.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') return false;
  const std::string_view port = s.substr(colon + 1);
  unsigned v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || v > 65535) return false;
  return allow_port_zero || v > 0;
}

std::string read_file(const std::filesystem::path& p, std::string& error) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    error = std::string("cannot read: ") + std::strerror(errno);
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) error = "read failed";
  return ss.str();
}

namespace {

// Counts the nodes of one document without building it.
class NodeCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& m) override { start = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { ++nulls; }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++nodes; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { ++nodes; }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    ++nodes;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { ++nodes; }
  void OnMapEnd() override {}
  YAML::Mark start;
  int nodes = 0;
  int nulls = 0;
};

}  // namespace

// agent.yaml is one document. yaml-cpp 0.7's LoadAll never returns on some inputs (a stray
// ',' outside a flow collection yields empty documents forever without consuming it), so
// walk at most a few documents by hand and call "no progress" a syntax error.
std::optional<std::pair<Position, std::string>> check_single_document(std::string_view yaml) {
  std::istringstream in{std::string(yaml)};
  YAML::Parser parser(in);
  std::optional<YAML::Mark> previous;
  for (int doc = 0; doc < 4; ++doc) {
    NodeCounter c;
    if (!parser.HandleNextDocument(c)) return std::nullopt;
    if (previous && previous->pos == c.start.pos && c.nodes == 0)
      return std::make_pair(pos_of(c.start), std::string("YAML syntax: unexpected character"));
    if (doc > 0 && c.nodes > 0)
      return std::make_pair(pos_of(c.start), std::string("more than one YAML document; agent.yaml holds exactly one"));
    previous = c.start;
  }
  return std::nullopt;
}

}  // namespace yaml
}  // namespace mcp::config
