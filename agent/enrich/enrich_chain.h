// The one enrichment chain: what the agent adds to a kept event between the ring buffer and the
// export filter, on the consumer thread, in this order (each stage relies on the ones before):
//   PodIdentityStage  cgroup -> pod uid, container id (k8s/pod_identity.h)
//   ProbeLabelStage   the probe's service and tags; a CUDA probe's API name
//   CudaSymbolStage   kernel names, graphs, freed bytes; drops the runtime's bookkeeping calls
//                     (needs the API name)
//   ClockStage        wall time and HLC from the kernel's ktime
//   PodNamesStage     pod name, namespace, container name and labels from the pod watch (needs
//                     the container id)
// A stage returns false to drop the event; nothing after it runs. Not thread-safe: one
// consumer thread, as the ring buffer's.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "common/event.h"

namespace mcp::enrich {

class Enricher {
 public:
  virtual ~Enricher() = default;
  // False: the event is not one to pass on.
  virtual bool enrich(Event& e) = 0;
  virtual std::string_view name() const = 0;
};

class EnrichChain {
 public:
  void add(std::unique_ptr<Enricher> stage) { stages_.push_back(std::move(stage)); }
  bool enrich(Event& e) {
    for (auto& s : stages_)
      if (!s->enrich(e)) return false;
    return true;
  }
  // Stage names in order (for the readiness log and tests).
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> out;
    for (const auto& s : stages_) out.push_back(s->name());
    return out;
  }

 private:
  std::vector<std::unique_ptr<Enricher>> stages_;
};

}  // namespace mcp::enrich
