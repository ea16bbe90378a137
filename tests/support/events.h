// Test support: events without a kernel. make_event(i) is the bench/system/e2e shape (a
// getppid syscall event of the workload, labelled with a service and two tags, kept at
// rate 1; i moves the clocks, pid and return value), and to_json(e) is the line the agent
// prints for an event (the one JSON encoder). Header-only; link mcp_output.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "common/event.h"
#include "output/formatter.h"

namespace mcp::test {

inline Event make_event(uint32_t i) {
  static const std::string kProbe = "syscall:getppid";  // Event::probe is a view
  Event e;
  e.ts_ns = 1764700000000000000ull + i * 5000ull;
  e.ktime_ns = 123456789000ull + i * 5000ull;
  e.hlc = (e.ts_ns << 16) | (i & 0xff);
  e.kind = EventKind::kSyscall;
  e.probe = kProbe;
  e.pid = 4242 + i % 7;
  e.tid = e.pid;
  e.cpu = i & 1;
  e.cgroup_id = 9876;
  const char comm[] = "mcp-workload";
  std::copy(comm, comm + sizeof(comm) - 1, e.comm.begin());
  e.nargs = 0;
  e.has_ret = true;
  e.ret = 4241 + i;
  e.threshold = UINT64_MAX;
  e.service = "bench";
  e.tags = {{"env", "lab"}, {"zone", "a"}};
  return e;
}

inline std::string to_json(const Event& e) {
  std::string out;
  output::make_formatter("json")->format(e, out);
  return out;
}

}  // namespace mcp::test
