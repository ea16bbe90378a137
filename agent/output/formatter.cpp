#include "output/formatter.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>
#include <span>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"

namespace mcp::output {

namespace {

// The JSON encoder writes through a raw pointer into room reserved once per event (an upper
// bound of what it can write) instead of appending piece by piece: at a million events per
// second the per-append capacity checks, strlen of literals and tiny memcpy calls cost more
// than the bytes themselves (bench/wire: BM_SubscribeCompact).

// A string literal without its NUL.
template <size_t N>
char* put(char* p, const char (&literal)[N]) {
  std::memcpy(p, literal, N - 1);
  return p + N - 1;
}

char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// Integers: at most 20 characters (a uint64_t, or an int64_t with its sign). Digits go out two
// at a time from a table, in groups of eight, without first counting them (std::to_chars and
// fmt::format_int do): timestamps, ids and thresholds are 12 to 20 digits long.
constexpr size_t kIntBound = 20;

constexpr auto kDigitPairs = [] {
  std::array<char, 200> t{};
  for (int i = 0; i < 100; ++i) {
    t[static_cast<size_t>(2 * i)] = static_cast<char>('0' + i / 10);
    t[static_cast<size_t>(2 * i + 1)] = static_cast<char>('0' + i % 10);
  }
  return t;
}();

char* put2(char* p, uint32_t v) {  // v < 100, two digits
  std::memcpy(p, &kDigitPairs[2 * v], 2);
  return p + 2;
}

char* put8(char* p, uint32_t v) {  // v < 10^8, exactly eight digits
  const uint32_t hi = v / 10000, lo = v % 10000;
  put2(p, hi / 100);
  put2(p + 2, hi % 100);
  put2(p + 4, lo / 100);
  put2(p + 6, lo % 100);
  return p + 8;
}

char* put_upto8(char* p, uint32_t v) {  // v < 10^8, no leading zeros
  if (v < 100) {
    if (v < 10) {
      *p++ = static_cast<char>('0' + v);
      return p;
    }
    return put2(p, v);
  }
  if (v < 10000) {
    if (v < 1000) *p++ = static_cast<char>('0' + v / 100);
    else p = put2(p, v / 100);
    return put2(p, v % 100);
  }
  const uint32_t hi = v / 10000, lo = v % 10000;  // 1 <= hi < 10^4
  p = put_upto8(p, hi);
  p = put2(p, lo / 100);
  return put2(p, lo % 100);
}

char* put_int(char* p, uint64_t v) {
  constexpr uint64_t k8 = 100000000, k16 = k8 * k8;
  if (v < k8) return put_upto8(p, static_cast<uint32_t>(v));
  if (v < k16) {
    p = put_upto8(p, static_cast<uint32_t>(v / k8));
    return put8(p, static_cast<uint32_t>(v % k8));
  }
  p = put_upto8(p, static_cast<uint32_t>(v / k16));  // at most 1844
  const uint64_t rest = v % k16;
  p = put8(p, static_cast<uint32_t>(rest / k8));
  return put8(p, static_cast<uint32_t>(rest % k8));
}

char* put_int(char* p, uint32_t v) { return put_int(p, static_cast<uint64_t>(v)); }

char* put_int(char* p, int64_t v) {
  if (v >= 0) return put_int(p, static_cast<uint64_t>(v));
  *p++ = '-';
  return put_int(p, 0 - static_cast<uint64_t>(v));  // INT64_MIN included
}

// At most 6 bytes out per byte in ("\u001f"; an invalid byte becomes the 3 bytes of U+FFFD, a
// valid sequence stays as it is), plus the quotes.
constexpr size_t json_string_bound(size_t n) { return 6 * n + 2; }

char* put_json_string(char* p, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  *p++ = '"';
  for (size_t i = 0; i < s.size();) {
    // Eight bytes at a time while none needs escaping or checking (no byte below 0x20 or
    // above 0x7f, no quote, no backslash): they go out as they are.
    if (i + 8 <= s.size()) {
      uint64_t x;
      std::memcpy(&x, s.data() + i, 8);
      constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
      const auto has_zero = [](uint64_t y) { return (y - kOnes) & ~y & kHigh; };
      if (((x & kHigh) | ((x - 0x20 * kOnes) & ~x & kHigh) | has_zero(x ^ ('"' * kOnes)) |
           has_zero(x ^ ('\\' * kOnes))) == 0) {
        std::memcpy(p, &x, 8);
        p += 8;
        i += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(s[i]);
    // Plain printable ASCII: nearly every byte of probes, comms, services and tags.
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *p++ = static_cast<char>(c);
      ++i;
      continue;
    }
    if (c >= 0x80) {
      // comm is cut at 15 bytes, maybe mid-character, and a traced process picks its
      // own bytes: never emit invalid JSON (the same repair as the protobuf path).
      const size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        p = put(p, "\xef\xbf\xbd");  // U+FFFD
        ++i;
      } else {
        p = put(p, s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': p = put(p, "\\\""); break;
      case '\\': p = put(p, "\\\\"); break;
      case '\n': p = put(p, "\\n"); break;
      case '\r': p = put(p, "\\r"); break;
      case '\t': p = put(p, "\\t"); break;
      default:
        p = put(p, "\\u00");
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 0xf];
    }
    ++i;
  }
  *p++ = '"';
  return p;
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

size_t pairs_bound(std::string_view key, const Pairs& pairs) {
  if (pairs.empty()) return 0;
  size_t n = key.size() + 6;  // ,"key":{}
  for (const auto& [k, v] : pairs) n += json_string_bound(k.size()) + json_string_bound(v.size()) + 2;
  return n;
}

// Pairs in key order (stable, so a repeated key keeps its place): the compact wire format
// sorts them (proto/mcp/v1/sampling.proto StringPairs), and `trace` and `subscribe` must print
// the same bytes for the same event.
char* put_pairs(char* p, std::string_view key, const Pairs& pairs) {
  if (pairs.empty()) return p;
  p = put(p, ",\"");
  p = put(p, key);
  p = put(p, "\":{");
  const auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  auto emit = [&](size_t n, const std::pair<std::string, std::string>& kv) {
    if (n) *p++ = ',';
    p = put_json_string(p, kv.first);
    *p++ = ':';
    p = put_json_string(p, kv.second);
  };
  if (std::is_sorted(pairs.begin(), pairs.end(), by_key)) {
    for (size_t i = 0; i < pairs.size(); i++) emit(i, pairs[i]);
  } else {
    std::vector<const std::pair<std::string, std::string>*> order;
    order.reserve(pairs.size());
    for (const auto& kv : pairs) order.push_back(&kv);
    std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) { return by_key(*a, *b); });
    for (size_t i = 0; i < order.size(); i++) emit(i, *order[i]);
  }
  *p++ = '}';
  return p;
}

// [a,b,c]: at most size * (kIntBound + 1) + 2 characters.
template <typename T, size_t N>
char* put_int_array(char* p, std::span<const T, N> values) {
  *p++ = '[';
  for (size_t i = 0; i < values.size(); i++) {
    if (i) *p++ = ',';
    p = put_int(p, values[i]);
  }
  *p++ = ']';
  return p;
}

// Literals (about 150 characters) and 15 integers.
constexpr size_t kCudaFixedBound = 180 + 15 * kIntBound;

size_t cuda_bound(const CudaInfo& c) {
  return kCudaFixedBound + json_string_bound(c.api.size()) + json_string_bound(c.kernel.size()) +
         c.user_stack.size() * (kIntBound + 1);
}

char* put_cuda(char* p, const CudaInfo& c) {
  p = put(p, ",\"cuda\":{\"api\":");
  p = put_json_string(p, c.api);
  p = put(p, c.launch ? ",\"launch\":true" : ",\"launch\":false");
  if (!c.kernel.empty()) {
    p = put(p, ",\"kernel\":");
    p = put_json_string(p, c.kernel);
    p = put(p, ",\"grid\":");
    p = put_int_array(p, std::span(c.grid));
    p = put(p, ",\"block\":");
    p = put_int_array(p, std::span(c.block));
    p = put(p, ",\"shared_mem\":");
    p = put_int(p, c.shared_mem);
    p = put(p, ",\"stream\":");
    p = put_int(p, c.stream);
  }
  if (c.bytes) {
    p = put(p, ",\"bytes\":");
    p = put_int(p, c.bytes);
  }
  if (c.memcpy_kind) {
    p = put(p, ",\"memcpy_kind\":");
    p = put_int(p, c.memcpy_kind);
  }
  if (c.graph) {
    p = put(p, ",\"graph\":");
    p = put_int(p, c.graph);
  }
  if (c.graph_kernel_nodes) {
    p = put(p, ",\"graph_kernel_nodes\":");
    p = put_int(p, *c.graph_kernel_nodes);
  }
  if (c.slow_mode) {
    p = put(p, ",\"slow_mode\":true,\"user_stack\":");
    p = put_int_array(p, std::span(c.user_stack));
  }
  *p++ = '}';
  return p;
}

// "stack":[{"addr":A,"sym":S,"offset":O,"module":M},...] (--stack).
size_t stack_bound(const std::vector<StackFrame>& stack) {
  size_t n = 16;
  for (const auto& f : stack)
    n += 48 + 2 * kIntBound + json_string_bound(f.sym.size()) + json_string_bound(f.module.size());
  return n;
}

char* put_stack(char* p, const std::vector<StackFrame>& stack) {
  if (stack.empty()) return p;
  p = put(p, ",\"stack\":[");
  for (size_t i = 0; i < stack.size(); i++) {
    const auto& f = stack[i];
    p = put(p, i ? ",{\"addr\":" : "{\"addr\":");
    p = put_int(p, f.addr);
    p = put(p, ",\"sym\":");
    p = put_json_string(p, f.sym);
    p = put(p, ",\"offset\":");
    p = put_int(p, f.offset);
    p = put(p, ",\"module\":");
    p = put_json_string(p, f.module);
    *p++ = '}';
  }
  *p++ = ']';
  return p;
}

// Everything but the strings and pairs: the literals (about 300 characters), 16 integers, the
// weight (a double, at most 24 characters), the 32 hex digits of the trace id and th (14).
constexpr size_t kFixedBound = 320 + 16 * kIntBound + 32 + 32 + 16;

size_t json_bound(const Event& e) {
  size_t n = kFixedBound + json_string_bound(e.probe.size()) + json_string_bound(e.comm.size()) +
             json_string_bound(e.service.size()) + json_string_bound(e.container_id.size()) +
             json_string_bound(e.pod_uid.size()) + json_string_bound(e.pod.size()) +
             json_string_bound(e.pod_namespace.size()) + json_string_bound(e.container.size()) +
             pairs_bound("pod_labels", e.pod_labels) + pairs_bound("tags", e.tags) +
             pairs_bound("attributes", e.attributes);
  if (e.kind == EventKind::kCuda) n += cuda_bound(e.cuda);
  return n + stack_bound(e.stack);
}

char* put_json(char* p, const Event& e) {
  p = put(p, "{\"ts_ns\":");
  p = put_int(p, e.ts_ns);
  p = put(p, ",\"ktime_ns\":");
  p = put_int(p, e.ktime_ns);
  if (e.hlc) {
    p = put(p, ",\"hlc\":");
    p = put_int(p, e.hlc);
  }
  p = put(p, ",\"kind\":\"");
  p = put(p, to_string(e.kind));
  p = put(p, "\",\"probe\":");
  p = put_json_string(p, e.probe);
  p = put(p, ",\"pid\":");
  p = put_int(p, e.pid);
  p = put(p, ",\"tid\":");
  p = put_int(p, e.tid);
  p = put(p, ",\"comm\":");
  p = put_json_string(p, e.comm_view());
  p = put(p, ",\"cgroup_id\":");
  p = put_int(p, e.cgroup_id);
  p = put(p, ",\"cpu\":");
  p = put_int(p, e.cpu);
  p = put(p, ",\"args\":[");
  for (unsigned i = 0; i < e.nargs && i < e.args.size(); i++) {
    if (i) *p++ = ',';
    p = put_int(p, e.args[i]);
  }
  *p++ = ']';
  if (e.has_ret) {
    p = put(p, ",\"ret\":");
    p = put_int(p, e.ret);
  }
  if (e.has_duration) {
    p = put(p, ",\"duration_ns\":");
    p = put_int(p, e.duration_ns);
  }
  p = put(p, ",\"threshold\":");
  p = put_int(p, e.threshold);
  p = put(p, ",\"weight\":");
  if (e.threshold == UINT64_MAX) *p++ = '1';
  else p = fmt::format_to(p, FMT_COMPILE("{}"), e.weight());
  if (e.consistent) {
    p = put(p, ",\"th\":\"");
    p = put(p, otel_th(e.threshold));
    *p++ = '"';
  }
  if (e.has_trace_id()) {
    p = put(p, ",\"trace_id\":\"");
    p = fmt::format_to(p, FMT_COMPILE("{:016x}{:016x}"), e.trace_id_hi, e.trace_id_lo);
    *p++ = '"';
  }
  // Optional strings: printed only where known.
  auto field = [&p](const auto& key, std::string_view value) {
    if (value.empty()) return;
    p = put(p, key);
    p = put_json_string(p, value);
  };
  field(",\"service\":", e.service);
  field(",\"container_id\":", e.container_id);
  field(",\"pod_uid\":", e.pod_uid);
  field(",\"pod\":", e.pod);
  field(",\"namespace\":", e.pod_namespace);
  field(",\"container\":", e.container);
  p = put_pairs(p, "pod_labels", e.pod_labels);
  p = put_pairs(p, "tags", e.tags);
  p = put_pairs(p, "attributes", e.attributes);
  if (e.kind == EventKind::kCuda) p = put_cuda(p, e.cuda);
  p = put_stack(p, e.stack);
  return put(p, "}\n");
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  const size_t start = out.size();
  out.resize(start + json_string_bound(s.size()));
  char* const base = out.data();
  out.resize(static_cast<size_t>(put_json_string(base + start, s) - base));
}

namespace {

size_t columns(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The first `n` columns of `s`, cut at a character boundary.
std::string_view first_columns(std::string_view s, size_t n) {
  size_t cols = 0, i = 0;
  for (; i < s.size(); i++) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (cols == n) break;
    cols++;
  }
  return s.substr(0, i);
}

}  // namespace

std::string short_probe_name(std::string_view probe, size_t width) {
  static constexpr std::string_view kEllipsis = "\u2026";
  if (columns(probe) <= width || width < 2) return std::string(first_columns(probe, width));
  // "usdt:/dir/binary:provider:name": the kind stays, the path is shortened as a uprobe's.
  static constexpr std::string_view kUsdt = "usdt:";
  if (probe.substr(0, kUsdt.size()) == kUsdt && width > kUsdt.size() + 2)
    return std::string(kUsdt) + short_probe_name(probe.substr(kUsdt.size()), width - kUsdt.size());
  // "/dir/binary:symbol": the binary's path ends at the first ':' (a symbol may hold "::").
  const size_t colon = probe.find(':');
  const size_t slash = colon == std::string_view::npos ? std::string_view::npos : probe.rfind('/', colon);
  std::string out;
  if (slash != std::string_view::npos && slash > 0) {
    out = std::string(kEllipsis) + std::string(probe.substr(slash));
    if (columns(out) <= width) return out;
  } else {
    out = std::string(probe);
  }
  return std::string(first_columns(out, width - 1)) + std::string(kEllipsis);
}

namespace {

class JsonFormatter final : public Formatter {
 public:
  void format(const Event& e, std::string& out) const override {
    // One resize to the bound, one back to what was written.
    const size_t start = out.size();
    out.resize(start + json_bound(e));
    char* const base = out.data();
    out.resize(static_cast<size_t>(put_json(base + start, e) - base));
  }
};

const std::string* find_value(const std::vector<std::pair<std::string, std::string>>& pairs, std::string_view key) {
  for (const auto& [k, v] : pairs)
    if (k == key) return &v;
  return nullptr;
}

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
    fmt::format_to(it, "{}.{:06} {:<9} {:>7} {:>7} {:<16} {:<40} ", ts, (e.ts_ns / 1000) % 1000000,
                   to_string(e.kind), e.pid, e.tid, valid_utf8(e.comm_view()),
                   short_probe_name(valid_utf8(e.probe), 40));
    if (e.has_ret) fmt::format_to(it, "{:>14} ", e.ret);
    else fmt::format_to(it, "{:>14} ", "-");
    if (e.has_duration) fmt::format_to(it, "{:>12.3f}  ", static_cast<double>(e.duration_ns) / 1000.0);
    else fmt::format_to(it, "{:>12}  ", "-");
    if (e.kind == EventKind::kCuda && !e.cuda.kernel.empty()) {
      fmt::format_to(it, "{} <<<({},{},{}),({},{},{})>>>", valid_utf8(e.cuda.kernel), e.cuda.grid[0], e.cuda.grid[1],
                     e.cuda.grid[2], e.cuda.block[0], e.cuda.block[1], e.cuda.block[2]);
    } else if (e.args_declared) {
      for (unsigned i = 0; i < e.nargs; i++) {
        // A USDT string argument is shown as the string, escaped: the traced process chose its bytes.
        const std::string* s = e.kind == EventKind::kUsdt ? find_value(e.attributes, string_arg_attribute(i)) : nullptr;
        if (s) fmt::format_to(it, "{}{:?}", i ? " " : "", valid_utf8(*s));
        else fmt::format_to(it, "{}{:#x}", i ? " " : "", e.args[i]);
      }
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
