// Test support: a fixed, varied set of events for the JSON golden tests (the one encoder's
// bytes are recorded in tests/fixtures/json_golden.jsonl and must not change). Hand-made
// events cover every field and every escape (quotes, backslash, control characters, DEL,
// valid multi-byte UTF-8, invalid bytes, comm cut mid-character, CUDA launches and memcpys,
// fractional weights, trace ids, unsorted and repeated tag keys); the rest come from a fixed
// seed, with raw mt19937_64 output (specified by the standard, unlike its distributions) so
// every platform builds the same events. Header-only; link mcp_common.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "common/event.h"
#include "events.h"

namespace mcp::test {

struct GoldenEvents {
  std::deque<std::string> probes;  // Event::probe is a view: the set owns what it points to
  std::vector<Event> events;
};

inline GoldenEvents golden_events() {
  GoldenEvents g;
  auto probe = [&](std::string s) -> std::string_view { return g.probes.emplace_back(std::move(s)); };
  auto set_comm = [](Event& e, std::string_view c) {
    e.comm.fill(0);
    std::copy_n(c.data(), std::min(c.size(), e.comm.size()), e.comm.begin());
  };

  g.events.push_back(make_event(0));  // the bench/system/e2e shape
  g.events.push_back(make_event(77));

  Event u;
  u.ts_ns = UINT64_MAX;
  u.ktime_ns = 1;
  u.kind = EventKind::kUprobe;
  u.probe = probe("/usr/lib/x86_64-linux-gnu/libssl.so.3:SSL_write");
  u.pid = UINT32_MAX;
  u.tid = 1;
  u.cpu = 127;
  u.cgroup_id = UINT64_MAX;
  set_comm(u, "0123456789abcdef");  // 16 bytes, no NUL
  u.nargs = 6;
  u.args = {0, 1, UINT64_MAX, 42, 1ull << 63, 10};
  g.events.push_back(u);

  Event r = u;
  r.kind = EventKind::kUretprobe;
  r.hlc = 0x0123456789abcdefull;
  r.nargs = 2;
  r.has_ret = true;
  r.ret = INT64_MIN;
  r.has_duration = true;
  r.duration_ns = 123456789;
  r.threshold = probability_to_threshold(0.37);
  r.consistent = true;
  r.trace_id_hi = 0x0af7651916cd43ddull;
  r.trace_id_lo = 0x8448eb211c80319cull;
  r.service = "checkout";
  r.tags = {{"zone", "a"}, {"env", "prod"}, {"app", "x"}, {"env", "dup"}};
  r.attributes = {{"b", "2"}, {"a", "1"}};
  g.events.push_back(r);

  Event k = make_event(3);
  static const char kOdd[] = "/bin/we\"ird\\na\nme\r\t\x01\x1f\x7f:f\xc3\xa9 \xf0\x9f\x98\x80";
  k.probe = probe(std::string(kOdd, sizeof(kOdd)));  // with its NUL
  set_comm(k, "caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f");  // a 4-byte character cut at 16 bytes
  k.threshold = 1;  // a weight of 2^64
  k.consistent = true;
  k.trace_id_lo = 1;
  k.container_id = std::string(64, 'c');
  k.pod_uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
  k.pod = "web-7d4b9c8f5-x2x9q";
  k.pod_namespace = "shop";
  k.container = "nginx";
  k.pod_labels = {{"tier", "front"}, {"app", "web"}};
  k.service = std::string("svc\xff\xfe", 5);                               // invalid bytes
  k.tags = {{std::string("k\xc0\x80", 3), std::string("\xed\xa0\x80v", 4)}};  // overlong, surrogate
  g.events.push_back(k);

  Event c = make_event(4);
  c.kind = EventKind::kCuda;
  c.probe = probe("cuda:cudaLaunchKernel");
  c.nargs = 0;
  c.has_ret = false;
  c.cuda.api = "cudaLaunchKernel";
  c.cuda.launch = true;
  c.cuda.kernel = "void gemm<float, 128>(float const*, float*, int)";
  c.cuda.grid = {1024, 2, 1};
  c.cuda.block = {256, 1, UINT32_MAX};
  c.cuda.shared_mem = 49152;
  c.cuda.stream = 0x7f00deadbeefull;
  c.cuda.graph = 9;
  c.cuda.graph_kernel_nodes = 12;
  c.cuda.slow_mode = true;
  c.cuda.user_stack = {0x401000, 0x7fffffffe000, 0};
  g.events.push_back(c);

  Event m = c;
  m.cuda = CudaInfo{};
  m.cuda.api = "cudaMemcpyAsync";
  m.cuda.bytes = 1ull << 40;
  m.cuda.memcpy_kind = 2;
  m.cuda.graph_kernel_nodes = 0;
  g.events.push_back(m);

  Event a = m;
  a.cuda = CudaInfo{};
  a.cuda.api = "cudaStreamSynchronize";
  a.cuda.slow_mode = true;  // an empty stack
  g.events.push_back(a);

  Event s = make_event(5);
  s.has_ret = false;
  s.service.clear();
  s.tags.clear();
  s.nargs = 3;
  s.args = {3, 0x7ffc0000, 4096};
  g.events.push_back(s);

  // Fixed-seed events: random numbers everywhere and strings of arbitrary bytes.
  std::mt19937_64 rng(20261203);
  auto bytes = [&](size_t max_len) {
    std::string out(rng() % (max_len + 1), '\0');
    for (auto& ch : out) {
      const uint64_t v = rng();
      // Mostly printable ASCII, sometimes a byte that needs escaping or repair.
      ch = static_cast<char>(v % 4 ? 0x20 + (v >> 8) % 0x5f : (v >> 8) % 256);
    }
    return out;
  };
  auto pairs = [&] {
    std::vector<std::pair<std::string, std::string>> out(rng() % 4);
    for (auto& [key, value] : out) {
      key = bytes(6);
      value = bytes(10);
    }
    return out;
  };
  for (int i = 0; i < 200; ++i) {
    Event e;
    e.ts_ns = rng();
    e.ktime_ns = rng() >> (rng() % 64);
    e.hlc = rng() % 2 ? rng() : 0;
    e.kind = static_cast<EventKind>(rng() % 3);  // CUDA events are the hand-made ones
    e.probe = probe(bytes(40));
    e.pid = static_cast<uint32_t>(rng());
    e.tid = static_cast<uint32_t>(rng() >> (rng() % 32));
    e.cpu = static_cast<uint32_t>(rng() % 256);
    e.cgroup_id = rng() >> (rng() % 64);
    set_comm(e, bytes(16));
    e.nargs = static_cast<uint8_t>(rng() % 7);
    for (auto& arg : e.args) arg = rng() >> (rng() % 64);
    e.has_ret = rng() % 2;
    e.ret = static_cast<int64_t>(rng() >> (rng() % 64)) * (rng() % 2 ? 1 : -1);
    e.has_duration = rng() % 2;
    e.duration_ns = rng() >> (rng() % 64);
    e.threshold = rng() % 3 ? UINT64_MAX : rng() | 1;
    e.consistent = e.threshold != UINT64_MAX && rng() % 2;
    if (rng() % 2) {
      e.trace_id_hi = rng();
      e.trace_id_lo = rng();
    }
    if (rng() % 2) e.service = bytes(12);
    if (rng() % 4 == 0) e.container_id = bytes(64);
    if (rng() % 4 == 0) e.pod = bytes(20);
    if (rng() % 4 == 0) e.pod_namespace = bytes(10);
    if (rng() % 4 == 0) e.container = bytes(10);
    if (rng() % 4 == 0) e.pod_uid = bytes(36);
    e.pod_labels = pairs();
    e.tags = pairs();
    e.attributes = pairs();
    g.events.push_back(e);
  }
  return g;
}

}  // namespace mcp::test
