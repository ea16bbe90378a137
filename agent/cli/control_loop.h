// ControlLoop: the agent's steering thread. Every tick (100 ms) it reads the
// kernel's per-CPU counters, runs the per-probe rate controllers (target QPS)
// and writes their thresholds, and re-splits tenant quotas over CPUs by demand.
// Owns its thread; stop() (or the destructor) joins it.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "control/quota_balancer.h"
#include "control/rate_controller.h"
#include "control/tenant_quota.h"
#include "loader/bpf_session.h"

namespace mcp::cli {

struct ControlSettings {
  std::optional<double> target_qps;                // per probe; none: fixed rate
  std::optional<control::TenantQuotaTable> quotas; // none: no tenant quotas
  std::chrono::milliseconds tick{100};
};

class ControlLoop {
 public:
  ControlLoop(loader::BpfSession& session, ControlSettings settings);
  ~ControlLoop();
  void start();
  void stop();
  // Current kept/offered rates per probe (after stop(), the last ones).
  std::vector<control::ProbeRateStats> rate_stats() const;

 private:
  void run();
  void tick(uint64_t now_ns);
  void apply_quotas(bool rebalance);

  loader::BpfSession& session_;
  ControlSettings settings_;
  std::unique_ptr<control::RateController> rates_;
  std::vector<control::QuotaBalancer> balancers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex stats_mu_;
  std::vector<control::ProbeRateStats> stats_;
};

}  // namespace mcp::cli
