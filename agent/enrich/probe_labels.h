// ProbeLabels: what the runtime stamps on each event of a probe (service, tags, the CUDA
// API name), looked up by probe id on the consumer thread. ProbeSet (every front end's
// probes) rewrites them on reload, each a swapped immutable value.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mcp::enrich {

struct ProbeMeta {
  std::string service;
  std::vector<std::pair<std::string, std::string>> tags;
  std::string cuda_api;  // CUDA probes: the API name users see
};

class ProbeLabels {
 public:
  virtual ~ProbeLabels() = default;
  // Null when the probe has no labels. Thread-safe against the owner's updates.
  virtual std::shared_ptr<const ProbeMeta> meta(uint32_t probe_id) const = 0;
};

}  // namespace mcp::enrich
