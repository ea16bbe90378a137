// Test support: a tenant quota judged by the events it kept. quota_window() gathers the events
// of some cgroups (JSON lines with cgroup_id and ktime_ns); expect_within_quota() checks their
// rate over their own span against the quota, with the same bounds everywhere. Header-only.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace mcp::test {

struct QuotaWindow {
  uint64_t count = 0;
  std::map<uint64_t, uint64_t> per_cgroup;  // cgroup id -> events
  double span_s = 0;                        // first to last event, kernel clock
};

inline QuotaWindow quota_window(const std::vector<nlohmann::json>& events, const std::set<uint64_t>& cgroups) {
  QuotaWindow w;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& e : events) {
    const uint64_t cg = e["cgroup_id"];
    if (!cgroups.count(cg)) continue;
    const uint64_t t = e["ktime_ns"];
    first = std::min(first, t);
    last = std::max(last, t);
    w.count++;
    w.per_cgroup[cg]++;
  }
  if (w.count) w.span_s = static_cast<double>(last - first) / 1e9;
  return w;
}

// At most 1.1x the quota plus a whole burst per CPU (the rate is split among CPUs by demand,
// the burst is not), at least 0.8x; over more than 2 s so a burst cannot pass for a rate.
inline void expect_within_quota(const QuotaWindow& w, double quota, double burst) {
  ASSERT_GT(w.span_s, 2.0) << w.count << " events";
  const double bursts = burst * static_cast<double>(sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_LE(static_cast<double>(w.count), quota * w.span_s * 1.1 + bursts) << "span " << w.span_s << " s";
  EXPECT_GE(static_cast<double>(w.count), quota * w.span_s * 0.8) << "span " << w.span_s << " s";
}

}  // namespace mcp::test
