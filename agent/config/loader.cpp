// agent.yaml → Config. A small schema walker over yaml-cpp nodes: every mapping is read
// through MapReader, which rejects unknown and duplicate keys; every scalar through typed
// readers that reject quoted numbers and booleans ("80" is not 80). Problems are collected,
// not thrown one by one, so an operator sees all of them in one run.
#include "config/loader.h"

#include "config/file_trust.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "common/agent_id_rule.h"
#include "common/duration.h"
#include "common/sampling_bounds.h"
#include "common/text_file.h"
#include "k8s/pod_ref.h"
#include "mcp_abi.h"
#include "otlp/exporter_options.h"

namespace mcp::config {

std::string Diagnostic::str() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : mcp::Error(ExitCode::kUsage, diagnostics.empty() ? "invalid configuration" : diagnostics.front().str()),
      diagnostics_(std::move(diagnostics)) {}

namespace {

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

Position pos_of(const YAML::Mark& m) {
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

const char* kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "a scalar";
    default: return "nothing";
  }
}

// Reads one mapping, checking its keys against the schema.
class MapReader {
 public:
  MapReader(Ctx& ctx, const YAML::Node& node, std::string_view what,
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

bool is_plain(const YAML::Node& n) { return n.Tag() != "!"; }

std::optional<std::string> read_string(Ctx& ctx, const YAML::Node& n, std::string_view what, bool allow_empty = false) {
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

void read_sampling(Ctx& ctx, const YAML::Node& n, Sampling& out) {
  MapReader m(ctx, n, "sampling", {"rate", "target_qps", "consistent"});
  if (!m.valid()) return;
  if (m.has("rate") && m.has("target_qps")) {
    ctx.error(m.key_node("target_qps"), "sampling takes either 'rate' or 'target_qps', not both");
    return;
  }
  if (m.has("rate")) {
    if (auto r = read_number(ctx, m.get("rate"), "sampling.rate")) {
      if (!valid_sampling_rate(*r)) ctx.error(m.get("rate"), std::string("sampling.rate must be in ") + kSamplingRateRange);
      else out.rate = *r;
    }
  } else if (m.has("target_qps")) {
    if (auto q = read_number(ctx, m.get("target_qps"), "sampling.target_qps")) {
      if (!valid_target_qps(*q)) ctx.error(m.get("target_qps"), std::string("sampling.target_qps must be in ") + kTargetQpsRange);
      else out.target_qps = *q;
    }
  } else {
    ctx.error(n, "sampling needs 'rate' or 'target_qps'");
  }
  if (m.has("consistent"))
    if (auto b = read_bool(ctx, m.get("consistent"), "sampling.consistent")) out.consistent = *b;
}

// The `pod:` or `namespace:` key of a tenant or selector (`what`), as the API server names
// them; alone: with another key it would be unclear which one scopes.
std::optional<k8s::PodRef> read_pod_ref(Ctx& ctx, const YAML::Node& n, MapReader& m, const std::string& what,
                                        std::initializer_list<const char*> others) {
  std::optional<k8s::PodRef> out;
  for (const char* kind : {"pod", "namespace"}) {
    if (!m.has(kind)) continue;
    auto s = read_string(ctx, m.get(kind), what + "." + kind);
    if (!s) continue;
    std::string why;
    auto ref = k8s::parse_pod_ref(kind, *s, &why);
    if (!ref) {
      ctx.error(m.get(kind), what + "." + kind + ": " + why);
      continue;
    }
    ctx.pod_refs.emplace_back(pos_of(m.get(kind).Mark()), what + "." + kind);
    out = std::move(ref);
  }
  size_t keys = m.has("pod") + m.has("namespace");
  for (const char* k : others) keys += m.has(k);
  if ((m.has("pod") || m.has("namespace")) && keys > 1) {
    std::string all;
    for (const char* k : others) all += std::string("'") + k + "', ";
    ctx.error(n, what + " takes one of " + all + "'pod' or 'namespace'");
    return std::nullopt;
  }
  return out;
}

void read_selector(Ctx& ctx, const YAML::Node& n, Selector& out) {
  MapReader m(ctx, n, "selector", {"container_id", "cgroup_path", "pod", "namespace"});
  if (!m.valid()) return;
  out.pods = read_pod_ref(ctx, n, m, "selector", {"container_id", "cgroup_path"});
  if (m.has("pod") || m.has("namespace")) return;
  if (m.has("container_id"))
    if (auto s = read_string(ctx, m.get("container_id"), "selector.container_id")) out.container_id = *s;
  if (m.has("cgroup_path")) {
    if (auto s = read_string(ctx, m.get("cgroup_path"), "selector.cgroup_path")) {
      if (s->front() != '/') ctx.error(m.get("cgroup_path"), "selector.cgroup_path must start with '/'");
      else out.cgroup_path = *s;
    }
  }
  if (!m.has("container_id") && !m.has("cgroup_path"))
    ctx.error(n, "selector needs 'container_id', 'cgroup_path', 'pod' or 'namespace'");
}

void read_container(Ctx& ctx, const YAML::Node& n, ContainerScope& out) {
  if (n.IsNull()) {
    ctx.error(n, "container must be a mapping: {} for any container, {pod: NAMESPACE/NAME} or {namespace: NAME}");
    return;
  }
  MapReader m(ctx, n, "container", {"pod", "namespace"});
  if (!m.valid()) return;
  if (m.has("pod") && m.has("namespace")) {
    ctx.error(m.key_node("namespace"), "container takes either 'pod' (NAMESPACE/NAME) or 'namespace', not both");
    return;
  }
  // Names checked as the API server checks them (k8s/pod_ref.h, shared with tenants and selectors).
  for (const char* kind : {"pod", "namespace"}) {
    if (!m.has(kind)) continue;
    const std::string what = std::string("container.") + kind;
    if (auto s = read_string(ctx, m.get(kind), what)) {
      std::string why;
      if (auto ref = k8s::parse_pod_ref(kind, *s, &why)) out = {ref->ns, ref->name};
      else ctx.error(m.get(kind), what + ": " + why);
    }
  }
}

void read_tags(Ctx& ctx, const YAML::Node& n, std::vector<std::pair<std::string, std::string>>& out) {
  if (!n.IsMap()) {
    ctx.error(n, "tags must be a mapping of name: value, found " + std::string(kind_name(n)));
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    auto k = read_string(ctx, it->first, "tag names");
    auto v = read_string(ctx, it->second, "tag values", true);
    if (!k || !v) continue;
    if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == *k; })) {
      ctx.error(it->first, "duplicate tag '" + *k + "'");
      continue;
    }
    out.emplace_back(*k, *v);
  }
}

void read_probe_common(Ctx& ctx, const MapReader& m, ProbeSpec& p) {
  if (m.has("selector")) read_selector(ctx, m.get("selector"), p.selector);
  if (m.has("service"))
    if (auto s = read_string(ctx, m.get("service"), "service")) p.service = *s;
  if (m.has("tags")) read_tags(ctx, m.get("tags"), p.tags);
  if (m.has("sampling")) read_sampling(ctx, m.get("sampling"), p.sampling);
}

void read_uprobe(Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out) {
  MapReader m(ctx, n, "probe",
              {"binary", "library", "symbol", "selector", "container", "service", "tags", "trace_id", "latency",
               "sampling"});
  if (!m.valid()) return;
  ProbeSpec p;
  p.kind = ProbeKind::kUprobe;
  p.pos = pos_of(n.Mark());
  const size_t before = ctx.diagnostics().size();
  if (m.has("binary") == m.has("library")) {
    ctx.error(m.has("library") ? m.key_node("library") : n, "a probe needs exactly one of 'binary' or 'library'");
  } else if (m.has("binary")) {
    if (auto s = read_string(ctx, m.get("binary"), "binary")) {
      if (s->front() != '/') ctx.error(m.get("binary"), "binary must be an absolute path");
      p.target = *s;
    }
  } else if (auto s = read_string(ctx, m.get("library"), "library")) {
    p.target = *s;
    p.target_is_library = true;
  }
  if (!m.has("symbol")) ctx.error(n, "a probe needs 'symbol'");
  else if (auto s = read_string(ctx, m.get("symbol"), "symbol")) p.symbol = *s;
  if (m.has("trace_id")) {
    const YAML::Node t = m.get("trace_id");
    TraceIdArg parsed;
    const std::string why = t.IsScalar() ? control::trace_id_arg_error(t.Scalar(), parsed)
                                         : "expected N:hex32, N:bytes16 or N:u64 with N an argument index 0..5";
    if (!why.empty()) ctx.error(t, "trace_id: " + why);
    else p.trace_id = parsed;
  }
  if (m.has("latency"))
    if (auto b = read_bool(ctx, m.get("latency"), "latency")) p.latency = *b;
  if (m.has("container")) {
    if (m.has("library"))
      ctx.error(m.key_node("container"), "container probes need 'binary' (a path inside the containers), not 'library'");
    else if (m.has("selector"))
      ctx.error(m.key_node("container"), "container and selector cannot be combined: container already scopes the probe");
    else read_container(ctx, m.get("container"), p.container.emplace());
  }
  read_probe_common(ctx, m, p);
  if (ctx.diagnostics().size() == before) out.push_back(std::move(p));
}

bool valid_syscall_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

void read_syscall(Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out) {
  ProbeSpec p;
  p.kind = ProbeKind::kSyscall;
  p.latency = true;  // a configured syscall always reports its duration (entry and exit)
  p.pos = pos_of(n.Mark());
  const size_t before = ctx.diagnostics().size();
  YAML::Node name = n;
  if (n.IsMap()) {
    MapReader m(ctx, n, "syscall", {"name", "selector", "service", "tags", "sampling"});
    if (!m.has("name")) ctx.error(n, "a syscall entry needs 'name'");
    name = m.get("name");
    read_probe_common(ctx, m, p);
    if (!m.has("name")) return;
  }
  {
    if (auto s = read_string(ctx, name, "syscall name")) {
      if (!valid_syscall_name(*s)) ctx.error(name, "'" + *s + "' is not a syscall name (lower case, digits, _)");
      p.target = *s;
    }
  }
  if (ctx.diagnostics().size() == before) out.push_back(std::move(p));
}

void read_broker(Ctx& ctx, const YAML::Node& n, BrokerConfig& out) {
  MapReader m(ctx, n, "broker", {"addresses", "token_file", "tls", "compression", "batch_gap"});
  if (!m.valid()) return;
  if (!m.has("addresses")) {
    ctx.error(n, "broker needs 'addresses'");
  } else {
    const YAML::Node a = m.get("addresses");
    std::vector<YAML::Node> items;
    if (a.IsScalar()) items.push_back(a);
    else if (a.IsSequence()) for (const auto& i : a) items.push_back(i);
    else ctx.error(a, "broker.addresses must be a list of host:port");
    if (a.IsSequence() && a.size() == 0) ctx.error(a, "broker.addresses must not be empty");
    for (const auto& i : items) {
      auto s = read_string(ctx, i, "broker address");
      if (!s) continue;
      if (!valid_endpoint(*s, true, false)) ctx.error(i, "broker address '" + *s + "' is not host:port");
      else out.addresses.push_back(*s);
    }
  }
  if (m.has("token_file"))
    if (auto s = read_string(ctx, m.get("token_file"), "broker.token_file")) out.token_file = *s;
  if (m.has("compression")) {
    if (auto s = read_string(ctx, m.get("compression"), "broker.compression")) {
      if (*s == "none" || *s == "gzip") out.compression = *s;
      else ctx.error(m.get("compression"), "broker.compression must be none or gzip, not '" + *s + "'");
    }
  }
  if (m.has("batch_gap")) {
    if (auto s = read_string(ctx, m.get("batch_gap"), "broker.batch_gap")) {
      try {
        out.batch_gap = mcp::parse_duration_up_to(*s, std::chrono::seconds(1));
      } catch (const mcp::Error& e) {
        ctx.error(m.get("batch_gap"), std::string("broker.batch_gap: ") + e.what());
      }
    }
  }
  if (m.has("tls")) {
    MapReader t(ctx, m.get("tls"), "broker.tls", {"ca", "cert", "key"});
    if (!t.valid()) return;
    TlsConfig tls;
    if (t.has("ca")) if (auto s = read_string(ctx, t.get("ca"), "broker.tls.ca")) tls.ca = *s;
    if (t.has("cert")) if (auto s = read_string(ctx, t.get("cert"), "broker.tls.cert")) tls.cert = *s;
    if (t.has("key")) if (auto s = read_string(ctx, t.get("key"), "broker.tls.key")) tls.key = *s;
    if (t.has("cert") != t.has("key"))
      ctx.error(m.get("tls"), "broker.tls needs both 'cert' and 'key' (client certificate) or neither");
    out.tls = tls;
  }
}

void read_cuda(Ctx& ctx, const YAML::Node& n, Config& cfg) {
  MapReader m(ctx, n, "cuda", {"enabled", "libs", "latency", "slow_launch", "sampling", "service", "tags"});
  if (!m.valid()) return;
  CudaConfig& c = cfg.cuda;
  if (m.has("enabled")) if (auto b = read_bool(ctx, m.get("enabled"), "cuda.enabled")) c.enabled = *b;
  if (m.has("libs")) {
    c.libs = read_string_list(ctx, m.get("libs"), "cuda.libs");
    if (m.get("libs").IsSequence() && m.get("libs").size() == 0) ctx.error(m.get("libs"), "cuda.libs must not be empty");
  } else {
    c.libs = {kCudaDiscover};
  }
  if (m.has("slow_launch")) {
    if (auto s = read_string(ctx, m.get("slow_launch"), "cuda.slow_launch")) {
      try {
        c.slow_launch = mcp::parse_duration(*s);
      } catch (const mcp::Error& e) {
        ctx.error(m.get("slow_launch"), std::string("cuda.slow_launch: ") + e.what());
      }
    }
  }
  if (m.has("latency")) if (auto b = read_bool(ctx, m.get("latency"), "cuda.latency")) c.latency = *b;
  ProbeSpec tmpl;
  tmpl.kind = ProbeKind::kCuda;
  // Slow-launch detection measures each launch's latency: it needs the return probe.
  tmpl.latency = c.latency || c.slow_launch.count() > 0;
  tmpl.pos = pos_of(n.Mark());
  if (m.has("sampling")) read_sampling(ctx, m.get("sampling"), c.sampling);
  tmpl.sampling = c.sampling;
  if (m.has("service")) if (auto s = read_string(ctx, m.get("service"), "service")) tmpl.service = *s;
  if (m.has("tags")) read_tags(ctx, m.get("tags"), tmpl.tags);
  if (c.enabled) {
    for (const auto& lib : c.libs) {
      ProbeSpec p = tmpl;
      p.target = lib;
      cfg.probes.push_back(std::move(p));
    }
  }
}

std::optional<TenantQuota> read_quota(Ctx& ctx, const YAML::Node& n, bool tenant) {
  MapReader m(ctx, n, tenant ? "tenant quota" : "default quota",
              tenant ? std::initializer_list<std::string_view>{"cgroup_path", "pod", "namespace", "rate", "burst"}
                     : std::initializer_list<std::string_view>{"rate", "burst"});
  if (!m.valid()) return std::nullopt;
  const size_t before = ctx.diagnostics().size();
  TenantQuota q;
  q.pos = pos_of(n.Mark());
  if (tenant && (m.has("pod") || m.has("namespace"))) {
    q.pods = read_pod_ref(ctx, n, m, "tenant", {"cgroup_path"});
    if (q.pods) q.cgroup_path = q.pods->text();
  } else if (tenant) {
    if (!m.has("cgroup_path")) ctx.error(n, "a tenant quota needs 'cgroup_path', 'pod' or 'namespace'");
    else if (auto s = read_string(ctx, m.get("cgroup_path"), "cgroup_path")) {
      if (s->front() != '/') ctx.error(m.get("cgroup_path"), "cgroup_path must start with '/'");
      q.cgroup_path = *s;
    }
  }
  if (!m.has("rate")) ctx.error(n, "a quota needs 'rate' (events per second)");
  else if (auto r = read_number(ctx, m.get("rate"), "quota rate")) {
    if (!(*r > 0)) ctx.error(m.get("rate"), "quota rate must be greater than 0");
    q.rate = *r;
  }
  if (!m.has("burst")) {
    q.burst = q.rate;
  } else if (auto b = read_number(ctx, m.get("burst"), "quota burst")) {
    if (!(*b >= 1)) ctx.error(m.get("burst"), "quota burst must be at least 1");
    q.burst = *b;
  }
  if (ctx.diagnostics().size() != before) return std::nullopt;
  return q;
}

void read_quotas(Ctx& ctx, const YAML::Node& n, QuotaConfig& out) {
  MapReader m(ctx, n, "quotas", {"default", "tenants"});
  if (!m.valid()) return;
  if (m.has("default")) out.default_quota = read_quota(ctx, m.get("default"), false);
  if (m.has("tenants")) {
    const YAML::Node t = m.get("tenants");
    if (!t.IsSequence()) {
      ctx.error(t, "quotas.tenants must be a list");
      return;
    }
    for (const auto& item : t) {
      auto q = read_quota(ctx, item, true);
      if (!q) continue;
      auto dup = std::find_if(out.tenants.begin(), out.tenants.end(),
                              [&](const TenantQuota& o) { return o.cgroup_path == q->cgroup_path; });
      if (dup != out.tenants.end()) {
        ctx.error(item, "duplicate quota for '" + q->cgroup_path + "' (first at line " + std::to_string(dup->pos.line) + ")");
        continue;
      }
      out.tenants.push_back(*q);
    }
  }
}

// exporter.otlp: the settings `trace --otlp-*` takes (otlp/exporter_options.h), as keys.
// Relative ca / header_file paths are the config directory's, as compliance.file.
void read_otlp(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, otlp::ExporterOptions& out) {
  MapReader m(ctx, n, "exporter.otlp",
              {"endpoint", "insecure", "ca", "headers", "header_file", "queue", "batch", "interval", "timeout",
               "metrics_interval"});
  if (!m.valid()) return;
  auto path = [&](const std::string& s) { return s.front() == '/' ? s : (base_dir / s).string(); };
  if (!m.has("endpoint")) ctx.error(n, "exporter.otlp needs 'endpoint' (host:port of the collector)");
  else if (auto s = read_string(ctx, m.get("endpoint"), "exporter.otlp.endpoint")) {
    if (!valid_endpoint(*s, true, false)) ctx.error(m.get("endpoint"), "exporter.otlp.endpoint '" + *s + "' is not host:port");
    else out.endpoint = *s;
  }
  if (m.has("insecure")) if (auto b = read_bool(ctx, m.get("insecure"), "exporter.otlp.insecure")) out.insecure = *b;
  if (m.has("ca")) if (auto s = read_string(ctx, m.get("ca"), "exporter.otlp.ca")) out.ca_file = path(*s);
  if (out.insecure && !out.ca_file.empty())
    ctx.error(m.key_node("insecure"), "exporter.otlp: 'insecure' and 'ca' exclude each other");
  // A header problem names the header, never its value (tokens stay out of logs).
  auto header = [&](const YAML::Node& where, const std::string& text) {
    try {
      out.headers.push_back(otlp::parse_header(text));
    } catch (const mcp::Error& e) {
      ctx.error(where, std::string("exporter.otlp.headers: ") + e.what());
    }
  };
  if (m.has("header_file")) {
    if (auto s = read_string(ctx, m.get("header_file"), "exporter.otlp.header_file")) {
      try {
        out.headers = otlp::parse_header_lines(read_text_file(path(*s), "OTLP header file"));
      } catch (const mcp::Error& e) {
        ctx.error(m.get("header_file"), std::string("exporter.otlp.header_file: ") + e.what());
      }
    }
  }
  if (m.has("headers")) {
    const YAML::Node h = m.get("headers");
    if (!h.IsMap()) {
      ctx.error(h, std::string("exporter.otlp.headers must be a mapping of KEY: VALUE, found ") + kind_name(h));
    } else {
      for (auto it = h.begin(); it != h.end(); ++it) {
        const YAML::Node k = it->first, v = it->second;
        if (!k.IsScalar() || !v.IsScalar()) ctx.error(k, "exporter.otlp.headers entries must be KEY: VALUE strings");
        else header(k, k.Scalar() + "=" + v.Scalar());
      }
    }
  }
  auto positive = [&](const char* key, size_t& field) {
    if (!m.has(key)) return;
    const std::string what = std::string("exporter.otlp.") + key;
    if (auto v = read_integer(ctx, m.get(key), what)) {
      if (*v <= 0) ctx.error(m.get(key), what + " must be positive");
      else field = static_cast<size_t>(*v);
    }
  };
  positive("queue", out.queue_events);
  positive("batch", out.batch_events);
  auto duration = [&](const char* key, std::chrono::milliseconds& field, bool zero_ok) {
    if (!m.has(key)) return;
    const std::string what = std::string("exporter.otlp.") + key;
    if (auto s = read_string(ctx, m.get(key), what)) {
      try {
        const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(mcp::parse_duration(*s));
        if (d.count() < 0 || (d.count() == 0 && !zero_ok)) ctx.error(m.get(key), what + " must be positive");
        else field = d;
      } catch (const mcp::Error& e) {
        ctx.error(m.get(key), what + ": " + e.what());
      }
    }
  };
  duration("interval", out.batch_interval, false);
  duration("timeout", out.timeout, false);
  duration("metrics_interval", out.metrics_interval, true);
}

void read_exporter(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, Config& cfg) {
  MapReader m(ctx, n, "exporter", {"error_only", "sample_rate", "otlp"});
  if (!m.valid()) return;
  auto& out = cfg.exporter;
  if (m.has("error_only")) if (auto b = read_bool(ctx, m.get("error_only"), "exporter.error_only")) out.error_only = *b;
  if (m.has("sample_rate")) {
    if (auto r = read_number(ctx, m.get("sample_rate"), "exporter.sample_rate")) {
      if (!valid_sampling_rate(*r)) ctx.error(m.get("sample_rate"), std::string("exporter.sample_rate must be in ") + kSamplingRateRange);
      else out.sample_rate = *r;
    }
  }
  if (m.has("otlp")) read_otlp(ctx, m.get("otlp"), base_dir, cfg.otlp.emplace());
}

void read_service(Ctx& ctx, const YAML::Node& n, std::vector<ServiceStrategy>& out) {
  MapReader m(ctx, n, "service", {"service", "strategy", "weights", "target_qps"});
  if (!m.valid()) return;
  const size_t before = ctx.diagnostics().size();
  ServiceStrategy s;
  s.pos = pos_of(n.Mark());
  if (!m.has("service")) ctx.error(n, "a service entry needs 'service'");
  else if (auto v = read_string(ctx, m.get("service"), "service")) s.service = *v;
  if (!m.has("strategy")) {
    ctx.error(n, "a service entry needs 'strategy'");
  } else if (auto v = read_string(ctx, m.get("strategy"), "strategy")) {
    if (*v != "weighted") ctx.error(m.get("strategy"), "unknown strategy '" + *v + "' (supported: weighted)");
    s.strategy = *v;
  }
  if (m.has("target_qps")) {
    if (auto q = read_number(ctx, m.get("target_qps"), "target_qps")) {
      if (!(*q > 0)) ctx.error(m.get("target_qps"), "target_qps must be greater than 0");
      s.target_qps = *q;
    }
  }
  if (!m.has("weights")) {
    if (s.strategy == "weighted") ctx.error(n, "strategy 'weighted' needs 'weights' (e.g. {v1: 80, v2: 20})");
  } else {
    const YAML::Node w = m.get("weights");
    if (!w.IsMap() || w.size() == 0) {
      ctx.error(w, "weights must be a non-empty mapping of version: percent");
    } else {
      long long sum = 0;
      bool all_ok = true;
      for (auto it = w.begin(); it != w.end(); ++it) {
        auto version = read_string(ctx, it->first, "version names");
        auto pct = read_integer(ctx, it->second, "weight");
        if (!version || !pct) {
          all_ok = false;
          continue;
        }
        if (*pct < 0 || *pct > 100) {
          ctx.error(it->second, "weight must be between 0 and 100, found " + std::to_string(*pct));
          all_ok = false;
          continue;
        }
        if (std::any_of(s.weights.begin(), s.weights.end(), [&](const auto& p) { return p.first == *version; })) {
          ctx.error(it->first, "duplicate version '" + *version + "'");
          all_ok = false;
          continue;
        }
        s.weights.emplace_back(*version, static_cast<int>(*pct));
        sum += *pct;
      }
      if (all_ok && sum != 100) ctx.error(w, "weights sum to " + std::to_string(sum) + ", must sum to 100");
    }
  }
  if (ctx.diagnostics().size() != before) return;
  auto dup = std::find_if(out.begin(), out.end(), [&](const ServiceStrategy& o) { return o.service == s.service; });
  if (dup != out.end()) {
    ctx.error(n, "duplicate strategy for service '" + s.service + "' (first at line " + std::to_string(dup->pos.line) + ")");
    return;
  }
  out.push_back(std::move(s));
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

void read_compliance(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, ComplianceConfig& out) {
  MapReader m(ctx, n, "compliance", {"rules", "file"});
  if (!m.valid()) return;
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

void check_cross_references(Ctx& ctx, Config& cfg) {
  // Probes with the same attachment would double-count every event.
  for (size_t i = 0; i < cfg.probes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (cfg.probes[i].key() == cfg.probes[j].key()) {
        ctx.error(cfg.probes[i].pos, "duplicate probe '" + cfg.probes[i].key() + "' (first at line " +
                                         std::to_string(cfg.probes[j].pos.line) + ")");
        break;
      }
    }
  }
  for (const auto& s : cfg.services) {
    if (!s.target_qps && cfg.version_targets(s.service).empty())
      ctx.error(s.pos, "service '" + s.service +
                           "' has weights but no target: set target_qps here or sampling.target_qps on its probes");
  }
}

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

}  // namespace

std::string ProbeSpec::key() const {
  std::string k;
  switch (kind) {
    case ProbeKind::kUprobe: k = (target_is_library ? "uprobe:lib:" : "uprobe:") + target + ":" + symbol; break;
    case ProbeKind::kSyscall: k = "syscall:" + target; break;
    case ProbeKind::kCuda: k = "cuda:" + target; break;
  }
  if (!selector.container_id.empty()) k += "@container=" + selector.container_id;
  if (!selector.cgroup_path.empty()) k += "@cgroup=" + selector.cgroup_path;
  if (selector.pods) k += "@" + selector.pods->text();
  if (container) {
    if (!container->pod.empty()) k += "@in-pod=" + container->ns + "/" + container->pod;
    else if (!container->ns.empty()) k += "@in-namespace=" + container->ns;
    else k += "@in-containers";
  }
  return k;
}

const ServiceStrategy* Config::find_service(std::string_view name) const {
  for (const auto& s : services)
    if (s.service == name) return &s;
  return nullptr;
}

std::vector<VersionTarget> Config::version_targets(std::string_view service) const {
  const ServiceStrategy* s = find_service(service);
  if (!s) return {};
  double total = s->target_qps.value_or(0);
  if (!s->target_qps)
    for (const auto& p : probes)
      if (p.service == service && p.sampling.target_qps) total += *p.sampling.target_qps;
  if (!(total > 0)) return {};
  std::vector<VersionTarget> out;
  for (const auto& [version, pct] : s->weights) out.push_back({version, total * pct / 100.0});
  return out;
}

namespace {

void read_kubernetes(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, KubernetesConfig& out) {
  MapReader m(ctx, n, "kubernetes", {"pod_names", "api_server", "token_file", "ca_file", "pod_labels"});
  if (!m.valid()) return;
  if (m.has("pod_names"))
    if (auto b = read_bool(ctx, m.get("pod_names"), "kubernetes.pod_names")) out.pod_names = *b;
  if (m.has("api_server")) {
    if (auto s = read_string(ctx, m.get("api_server"), "kubernetes.api_server")) {
      if (!s->starts_with("https://")) ctx.error(m.get("api_server"), "kubernetes.api_server must be an https:// URL, found '" + *s + "'");
      else out.api_server = *s;
    }
  }
  // Relative files: to the configuration's directory, as ready_file.
  auto file = [&](const char* key, std::string& into) {
    if (!m.has(key)) return;
    if (auto s = read_string(ctx, m.get(key), std::string("kubernetes.") + key))
      into = (s->front() == '/' ? std::filesystem::path(*s) : base_dir / *s).string();
  };
  file("token_file", out.token_file);
  file("ca_file", out.ca_file);
  if (m.has("pod_labels")) out.pod_labels = read_string_list(ctx, m.get("pod_labels"), "kubernetes.pod_labels");
}

}  // namespace

Config parse_config(std::string_view yaml, const std::string& file, const std::filesystem::path& base_dir) {
  Ctx ctx(file, yaml);
  Config cfg;
  cfg.path = file;
  YAML::Node root;
  try {
    if (auto problem = check_single_document(yaml)) {
      ctx.error(problem->first, problem->second);
      throw ConfigError(std::move(ctx.diagnostics()));
    }
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    ctx.error(pos_of(e.mark), "YAML syntax: " + e.msg);
    throw ConfigError(std::move(ctx.diagnostics()));
  }
  if (root.IsNull()) {
    ctx.error(Position{1, 1}, "empty configuration (expected a mapping with probes, broker, ...)");
    throw ConfigError(std::move(ctx.diagnostics()));
  }
  MapReader top(ctx, root, "agent.yaml",
                {"version", "node_name", "broker", "probes", "syscalls", "cuda", "quotas", "exporter",
                 "services", "compliance", "metrics", "ready_file", "kubernetes"});
  if (top.valid()) {
    if (top.has("version")) {
      auto v = read_integer(ctx, top.get("version"), "version");
      if (v && *v != 1) ctx.error(top.get("version"), "unsupported version " + std::to_string(*v) + " (this agent reads version 1)");
    }
    if (top.has("node_name"))
      if (auto s = read_string(ctx, top.get("node_name"), "node_name", true)) {
        // The node name is the agent id the broker sees: one it would refuse loses every batch.
        if (const auto why = agent_id_problem(*s); why && !s->empty())
          ctx.error(top.get("node_name"), "node_name '" + *s + "' cannot be an agent id: " + *why);
        else
          cfg.node_name = *s;
      }
    if (top.has("ready_file"))  // relative: to the file's directory, as compliance.file
      if (auto s = read_string(ctx, top.get("ready_file"), "ready_file"); s && !s->empty())
        cfg.ready_file = (s->front() == '/' ? std::filesystem::path(*s) : base_dir / *s).string();
    if (top.has("broker")) read_broker(ctx, top.get("broker"), cfg.broker);
    if (top.has("probes")) {
      const YAML::Node p = top.get("probes");
      if (!p.IsSequence()) ctx.error(p, "probes must be a list, found " + std::string(kind_name(p)));
      else for (const auto& item : p) read_uprobe(ctx, item, cfg.probes);
    }
    if (top.has("syscalls")) {
      const YAML::Node s = top.get("syscalls");
      if (!s.IsSequence()) ctx.error(s, "syscalls must be a list of names, found " + std::string(kind_name(s)));
      else for (const auto& item : s) read_syscall(ctx, item, cfg.probes);
    }
    // Each uprobe and syscall takes one of the kernel's probe slots, twice during a reload
    // that replaces it: `run` would refuse the rest only once it has attached the first ones.
    if (cfg.probes.size() > MCP_MAX_CONFIGURED_PROBES)
      ctx.error(top.has("probes") ? top.get("probes") : top.get("syscalls"),
                std::to_string(cfg.probes.size()) + " probes and syscalls: at most " +
                    std::to_string(MCP_MAX_CONFIGURED_PROBES) + " (a reload stages the new beside the old)");
    if (top.has("cuda")) read_cuda(ctx, top.get("cuda"), cfg);
    if (top.has("quotas")) read_quotas(ctx, top.get("quotas"), cfg.quotas);
    if (top.has("exporter")) read_exporter(ctx, top.get("exporter"), base_dir, cfg);
    if (top.has("services")) {
      const YAML::Node s = top.get("services");
      if (!s.IsSequence()) ctx.error(s, "services must be a list, found " + std::string(kind_name(s)));
      else for (const auto& item : s) read_service(ctx, item, cfg.services);
    }
    if (top.has("compliance")) read_compliance(ctx, top.get("compliance"), base_dir, cfg.compliance);
    if (top.has("kubernetes")) read_kubernetes(ctx, top.get("kubernetes"), base_dir, cfg.kubernetes);
    if (!cfg.kubernetes.pod_names)
      for (const auto& [pos, what] : ctx.pod_refs)
        ctx.error(pos, what + " needs the pod watch, which kubernetes.pod_names: false turns off");
    if (top.has("metrics")) {
      MapReader m(ctx, top.get("metrics"), "metrics", {"listen"});
      if (m.valid() && m.has("listen")) {
        if (auto s = read_string(ctx, m.get("listen"), "metrics.listen")) {
          if (!valid_endpoint(*s, false, true)) ctx.error(m.get("listen"), "metrics.listen '" + *s + "' is not host:port");
          else cfg.metrics_listen = *s;
        }
      }
    }
  }
  if (ctx.ok()) check_cross_references(ctx, cfg);
  if (!ctx.ok()) {
    auto& d = ctx.diagnostics();
    const std::string& self = ctx.file();
    std::stable_sort(d.begin(), d.end(), [&](const Diagnostic& a, const Diagnostic& b) {
      return std::make_tuple(a.file != self, a.file, a.line, a.column) <
             std::make_tuple(b.file != self, b.file, b.line, b.column);
    });
    throw ConfigError(std::move(d));
  }
  if (!cfg.compliance.rules) cfg.compliance.rules = std::make_shared<const rules::RuleSet>();
  return cfg;
}

Config load_config(const std::filesystem::path& path) {
  if (std::string why = untrusted_reason(path); !why.empty())
    throw ConfigError({Diagnostic{path.string(), 0, 0, why}});
  std::string err;
  const std::string text = read_file(path, err);
  if (!err.empty()) throw ConfigError({Diagnostic{path.string(), 0, 0, err}});
  return parse_config(text, path.string(), path.parent_path());
}

}  // namespace mcp::config
