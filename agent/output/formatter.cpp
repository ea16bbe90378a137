#include "output/formatter.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"

namespace mcp::output {

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size(); i++) {
    // Runs of plain printable ASCII (nearly every byte of probes, comms, services) go in one append.
    size_t run = i;
    while (run < s.size()) {
      const auto r = static_cast<unsigned char>(s[run]);
      if (r < 0x20 || r >= 0x80 || r == '"' || r == '\\') break;
      ++run;
    }
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      if (i == s.size()) break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // comm is cut at 15 bytes, maybe mid-character, and a traced process picks its
      // own bytes: never emit invalid JSON (the same repair as the protobuf path).
      const size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        out += "\ufffd";
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}

namespace {

// Pairs in key order (stable, so a repeated key keeps its place): the compact wire format
// sorts them (proto/mcp/v1/sampling.proto StringPairs), and `trace` and `subscribe` must print
// the same bytes for the same event.
void append_pairs(std::string& out, std::string_view key,
                  const std::vector<std::pair<std::string, std::string>>& pairs) {
  if (pairs.empty()) return;
  out += ",\"";
  out += key;
  out += "\":{";
  const auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  auto emit = [&](size_t n, const std::pair<std::string, std::string>& p) {
    if (n) out.push_back(',');
    append_json_string(out, p.first);
    out.push_back(':');
    append_json_string(out, p.second);
  };
  if (std::is_sorted(pairs.begin(), pairs.end(), by_key)) {
    for (size_t i = 0; i < pairs.size(); i++) emit(i, pairs[i]);
  } else {
    std::vector<const std::pair<std::string, std::string>*> order;
    order.reserve(pairs.size());
    for (const auto& p : pairs) order.push_back(&p);
    std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) { return by_key(*a, *b); });
    for (size_t i = 0; i < order.size(); i++) emit(i, *order[i]);
  }
  out.push_back('}');
}

void append_cuda(std::string& out, const CudaInfo& c) {
  auto it = std::back_inserter(out);
  out += ",\"cuda\":{\"api\":";
  append_json_string(out, c.api);
  if (!c.kernel.empty()) {
    out += ",\"kernel\":";
    append_json_string(out, c.kernel);
    fmt::format_to(it, ",\"grid\":[{},{},{}],\"block\":[{},{},{}],\"shared_mem\":{},\"stream\":{}", c.grid[0],
                   c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2], c.shared_mem, c.stream);
  }
  if (c.bytes) fmt::format_to(it, ",\"bytes\":{}", c.bytes);
  if (c.memcpy_kind) fmt::format_to(it, ",\"memcpy_kind\":{}", c.memcpy_kind);
  if (c.graph) fmt::format_to(it, ",\"graph\":{}", c.graph);
  if (c.graph_kernel_nodes) fmt::format_to(it, ",\"graph_kernel_nodes\":{}", *c.graph_kernel_nodes);
  if (c.slow_mode) {
    out += ",\"slow_mode\":true,\"user_stack\":[";
    for (size_t i = 0; i < c.user_stack.size(); i++) fmt::format_to(it, "{}{}", i ? "," : "", c.user_stack[i]);
    out.push_back(']');
  }
  out.push_back('}');
}

// Integers go through fmt::format_int and keys are literal appends: this runs
// for every event, at up to millions per second.
template <typename T>
void append_int(std::string& out, T v) {
  const fmt::format_int f(v);
  out.append(f.data(), f.size());
}

class JsonFormatter final : public Formatter {
 public:
  void format(const Event& e, std::string& out) const override {
    out += "{\"ts_ns\":";
    append_int(out, e.ts_ns);
    out += ",\"ktime_ns\":";
    append_int(out, e.ktime_ns);
    if (e.hlc) {
      out += ",\"hlc\":";
      append_int(out, e.hlc);
    }
    out += ",\"kind\":\"";
    out += to_string(e.kind);
    out += "\",\"probe\":";
    append_json_string(out, e.probe);
    out += ",\"pid\":";
    append_int(out, e.pid);
    out += ",\"tid\":";
    append_int(out, e.tid);
    out += ",\"comm\":";
    append_json_string(out, e.comm_view());
    out += ",\"cgroup_id\":";
    append_int(out, e.cgroup_id);
    out += ",\"cpu\":";
    append_int(out, e.cpu);
    out += ",\"args\":[";
    for (unsigned i = 0; i < e.nargs; i++) {
      if (i) out.push_back(',');
      append_int(out, e.args[i]);
    }
    out.push_back(']');
    if (e.has_ret) {
      out += ",\"ret\":";
      append_int(out, e.ret);
    }
    if (e.has_duration) {
      out += ",\"duration_ns\":";
      append_int(out, e.duration_ns);
    }
    out += ",\"threshold\":";
    append_int(out, e.threshold);
    out += ",\"weight\":";
    if (e.threshold == UINT64_MAX) out.push_back('1');
    else fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}"), e.weight());
    if (e.consistent) {
      out += ",\"th\":\"";
      out += otel_th(e.threshold);
      out.push_back('"');
    }
    if (e.has_trace_id()) {
      out += ",\"trace_id\":\"";
      fmt::format_to(std::back_inserter(out), FMT_COMPILE("{:016x}{:016x}"), e.trace_id_hi, e.trace_id_lo);
      out.push_back('"');
    }
    if (!e.service.empty()) {
      out += ",\"service\":";
      append_json_string(out, e.service);
    }
    if (!e.container_id.empty()) {
      out += ",\"container_id\":";
      append_json_string(out, e.container_id);
    }
    if (!e.pod_uid.empty()) {
      out += ",\"pod_uid\":";
      append_json_string(out, e.pod_uid);
    }
    if (!e.pod.empty()) {
      out += ",\"pod\":";
      append_json_string(out, e.pod);
    }
    if (!e.pod_namespace.empty()) {
      out += ",\"namespace\":";
      append_json_string(out, e.pod_namespace);
    }
    if (!e.container.empty()) {
      out += ",\"container\":";
      append_json_string(out, e.container);
    }
    append_pairs(out, "pod_labels", e.pod_labels);
    append_pairs(out, "tags", e.tags);
    append_pairs(out, "attributes", e.attributes);
    if (e.kind == EventKind::kCuda) append_cuda(out, e.cuda);
    out += "}\n";
  }
};

class TableFormatter final : public Formatter {
 public:
  void header(std::string& out) const override {
    fmt::format_to(std::back_inserter(out), "{:<15} {:<9} {:>7} {:>7} {:<16} {:<40} {:>14} {:>12}  {}\n", "TIME",
                   "KIND", "PID", "TID", "COMM", "PROBE", "RET", "LAT(us)", "ARGS");
  }
  void format(const Event& e, std::string& out) const override {
    const time_t secs = static_cast<time_t>(e.ts_ns / 1000000000);
    struct tm tm;
    localtime_r(&secs, &tm);
    char ts[16];
    strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
    auto it = std::back_inserter(out);
    std::string_view probe = e.probe;
    if (probe.size() > 40) probe = probe.substr(probe.size() - 40);
    fmt::format_to(it, "{}.{:06} {:<9} {:>7} {:>7} {:<16} {:<40} ", ts, (e.ts_ns / 1000) % 1000000,
                   to_string(e.kind), e.pid, e.tid, valid_utf8(e.comm_view()), valid_utf8(probe));
    if (e.has_ret) fmt::format_to(it, "{:>14} ", e.ret);
    else fmt::format_to(it, "{:>14} ", "-");
    if (e.has_duration) fmt::format_to(it, "{:>12.3f}  ", static_cast<double>(e.duration_ns) / 1000.0);
    else fmt::format_to(it, "{:>12}  ", "-");
    if (e.kind == EventKind::kCuda && !e.cuda.kernel.empty()) {
      fmt::format_to(it, "{} <<<({},{},{}),({},{},{})>>>", valid_utf8(e.cuda.kernel), e.cuda.grid[0], e.cuda.grid[1],
                     e.cuda.grid[2], e.cuda.block[0], e.cuda.block[1], e.cuda.block[2]);
    } else {
      for (unsigned i = 0; i < e.nargs; i++) fmt::format_to(it, "{}{:#x}", i ? " " : "", e.args[i]);
    }
    out.push_back('\n');
  }
};

}  // namespace

std::unique_ptr<Formatter> make_formatter(std::string_view name) {
  if (name == "json") return std::make_unique<JsonFormatter>();
  if (name == "table") return std::make_unique<TableFormatter>();
  throw usage_error("unknown format '" + std::string(name) + "' (use json or table)");
}

}  // namespace mcp::output
