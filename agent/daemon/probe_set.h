// ProbeSet: the daemon's attached probes, keyed by the configuration's probe
// key, so a reload attaches, detaches or re-tunes exactly what changed. Also
// the per-probe enrichment (service, tags) the consumer thread reads while a
// reload rewrites it: each slot is an atomically swapped immutable value.
#pragma once
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/control_loop.h"
#include "config/config.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/bpf_session.h"
#include "mcp_abi.h"

namespace mcp::daemon {

struct ProbeMeta {
  std::string service;
  std::vector<std::pair<std::string, std::string>> tags;
  std::string cuda_api;  // CUDA probes: the API name users see
};

class ProbeSet {
 public:
  ProbeSet(loader::BpfSession& session, cli::ControlLoop& control, cuda::KernelSymbolizer& symbolizer)
      : session_(session), control_(control), symbolizer_(symbolizer) {}

  // Attaches `spec`; throws mcp::Error naming the probe when it cannot.
  void attach(const config::ProbeSpec& spec);
  void detach(const config::ProbeSpec& spec);
  // New sampling or enrichment for an attached probe: maps and table only.
  void retune(const config::ProbeSpec& spec);
  // Applies weighted service strategies: per-version targets for the probes they cover.
  void apply_services(const config::Config& cfg);

  // Consumer thread: enrichment of a probe id (null when unknown).
  std::shared_ptr<const ProbeMeta> meta(uint32_t probe_id) const {
    return meta_[probe_id % MCP_MAX_PROBES].load(std::memory_order_acquire);
  }
  size_t size() const { return attached_.size(); }

 private:
  void tune(uint32_t id, const config::ProbeSpec& spec);
  loader::ProbeConfig base_config(const config::ProbeSpec& spec) const;

  loader::BpfSession& session_;
  cli::ControlLoop& control_;
  cuda::KernelSymbolizer& symbolizer_;
  std::map<std::string, std::vector<uint32_t>> attached_;  // ProbeSpec::key() -> probe ids
  std::array<std::atomic<std::shared_ptr<const ProbeMeta>>, MCP_MAX_PROBES> meta_{};
};

// The cgroup v2 id a selector names (its cgroup path, or the cgroup whose
// directory name contains the container id); 0 for an empty selector.
uint64_t selector_cgroup_id(const config::Selector& selector);

}  // namespace mcp::daemon
