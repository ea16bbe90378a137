// agent.yaml's probes: `probes:` (uprobes), `syscalls:`, their selectors, tags and
// sampling, and `services:` (per-service sampling strategies).
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/sampling_bounds.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "control/trace_id_arg.h"
#include "k8s/pod_ref.h"
#include "loader/usdt_notes.h"
#include "mcp_abi.h"

namespace mcp::config {

using yaml::Ctx;
using yaml::MapReader;
using yaml::kind_name;
using yaml::pos_of;
using yaml::read_bool;
using yaml::read_integer;
using yaml::read_number;
using yaml::read_string;

namespace {

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

void read_probe_common(Ctx& ctx, const MapReader& m, ProbeSpec& p) {
  if (m.has("selector")) read_selector(ctx, m.get("selector"), p.selector);
  if (m.has("stack"))
    if (auto s = read_string(ctx, m.get("stack"), "stack")) {
      if (auto k = parse_stack_kind(*s)) p.stack = *k;
      else ctx.error(m.get("stack"), "stack must be user, kernel or both, got '" + *s + "'");
    }
  if (m.has("service"))
    if (auto s = read_string(ctx, m.get("service"), "service")) p.service = *s;
  if (m.has("tags")) read_tags(ctx, m.get("tags"), p.tags);
  if (m.has("sampling")) read_sampling(ctx, m.get("sampling"), p.sampling);
}

bool valid_syscall_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

}  // namespace

std::string add_string_arg(uint8_t& mask, long long index) {
  if (index < 0 || index >= MCP_MAX_ARGS) return "argument index must be 0..5";
  if (mask & (1u << index)) return "argument " + std::to_string(index) + " is given twice";
  if (__builtin_popcount(mask) >= MCP_MAX_STR_ARGS)
    return "at most " + std::to_string(MCP_MAX_STR_ARGS) + " strings per probe";
  mask |= static_cast<uint8_t>(1u << index);
  return "";
}

std::optional<uint8_t> parse_stack_kind(std::string_view text) {
  if (text == "user") return MCP_STACK_USER;
  if (text == "kernel") return MCP_STACK_KERNEL;
  if (text == "both") return MCP_STACK_USER | MCP_STACK_KERNEL;
  return std::nullopt;
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

// `string_args: [0, 1]`: argument indexes 0..5, at most MCP_MAX_STR_ARGS of them.
void read_string_args(Ctx& ctx, const YAML::Node& n, uint8_t& mask) {
  if (!n.IsSequence()) {
    ctx.error(n, "string_args must be a list of argument indexes 0..5, found " + std::string(kind_name(n)));
    return;
  }
  for (const auto& item : n)
    if (const auto i = read_integer(ctx, item, "string_args"))
      if (const auto why = add_string_arg(mask, *i); !why.empty()) ctx.error(item, "string_args: " + why);
}

void read_uprobe(Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out) {
  MapReader m(ctx, n, "probe",
              {"binary", "library", "symbol", "usdt", "args", "string_args", "stack", "selector", "container",
               "service", "tags", "trace_id", "latency", "sampling"});
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
  if (m.has("symbol") == m.has("usdt")) {
    ctx.error(m.has("usdt") ? m.key_node("usdt") : n, "a probe needs exactly one of 'symbol' or 'usdt'");
  } else if (m.has("symbol")) {
    if (auto s = read_string(ctx, m.get("symbol"), "symbol")) p.symbol = *s;
  } else if (auto s = read_string(ctx, m.get("usdt"), "usdt")) {
    p.kind = ProbeKind::kUsdt;
    p.symbol = *s;
    try {
      loader::split_usdt_name(*s);
    } catch (const std::exception& e) {
      ctx.error(m.get("usdt"), e.what());
    }
  }
  if (m.has("args")) {
    if (p.kind == ProbeKind::kUsdt) {
      ctx.error(m.key_node("args"), "args is for 'symbol' probes: a USDT probe's note declares its arguments");
    } else if (const auto n = read_integer(ctx, m.get("args"), "args")) {
      if (*n < 0 || *n > MCP_MAX_ARGS) ctx.error(m.get("args"), "args must be 0..6 (the function's argument count)");
      else p.args = static_cast<uint8_t>(*n);
    }
  }
  if (m.has("string_args")) {
    if (p.kind != ProbeKind::kUsdt) ctx.error(m.key_node("string_args"), "string_args is for 'usdt' probes");
    else read_string_args(ctx, m.get("string_args"), p.string_args);
  }
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
  if (p.latency && p.kind == ProbeKind::kUsdt) ctx.error(m.key_node("latency"), "a USDT probe has no return: no latency");
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

void read_syscall(Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out) {
  ProbeSpec p;
  p.kind = ProbeKind::kSyscall;
  p.latency = true;  // a configured syscall always reports its duration (entry and exit)
  p.pos = pos_of(n.Mark());
  const size_t before = ctx.diagnostics().size();
  YAML::Node name = n;
  if (n.IsMap()) {
    MapReader m(ctx, n, "syscall", {"name", "stack", "selector", "service", "tags", "sampling"});
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

}  // namespace mcp::config
