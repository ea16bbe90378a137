// The stages of the enrichment chain (enrich_chain.h), each a thin owner or user of the
// library that does the work, so the chain's order lives in one place (the runtime's start()).
#pragma once
#include <filesystem>
#include <memory>

#include "enrich/enrich_chain.h"
#include "enrich/probe_labels.h"
#include "k8s/pod_identity.h"
#include "k8s/pod_names.h"

namespace mcp::clock {
class Timestamper;
}
namespace mcp::cuda {
class KernelSymbolizer;
}
namespace mcp::symbolize {
class StackSymbolizer;
}

namespace mcp::enrich {

class PodIdentityStage final : public Enricher {
 public:
  // Roots as k8s::PodIdentityCache takes them (empty: the real cgroup2 mount; tests pass trees).
  explicit PodIdentityStage(std::filesystem::path cgroup2_root = {}, std::filesystem::path proc = "/proc")
      : cache_(std::move(cgroup2_root), std::move(proc)) {}
  bool enrich(Event& e) override {
    cache_.enrich(e);
    return true;
  }
  std::string_view name() const override { return "pod-identity"; }

 private:
  k8s::PodIdentityCache cache_;
};

class ProbeLabelStage final : public Enricher {
 public:
  explicit ProbeLabelStage(const ProbeLabels& labels) : labels_(labels) {}
  bool enrich(Event& e) override;
  std::string_view name() const override { return "probe-labels"; }

 private:
  const ProbeLabels& labels_;
};

class CudaSymbolStage final : public Enricher {
 public:
  explicit CudaSymbolStage(cuda::KernelSymbolizer& symbolizer) : symbolizer_(symbolizer) {}
  bool enrich(Event& e) override;
  std::string_view name() const override { return "cuda-symbols"; }

 private:
  cuda::KernelSymbolizer& symbolizer_;
};

// Names the stacks of events that carry one (--stack); others pass untouched.
class StackSymbolStage final : public Enricher {
 public:
  explicit StackSymbolStage(symbolize::StackSymbolizer& symbolizer) : symbolizer_(symbolizer) {}
  bool enrich(Event& e) override;
  std::string_view name() const override { return "stack-symbols"; }

 private:
  symbolize::StackSymbolizer& symbolizer_;
};

class ClockStage final : public Enricher {
 public:
  explicit ClockStage(clock::Timestamper& clock) : clock_(clock) {}
  bool enrich(Event& e) override;
  std::string_view name() const override { return "clock"; }

 private:
  clock::Timestamper& clock_;
};

// Owns the pod watch: start() it (and wait for its first list) before events flow.
class PodNamesStage final : public Enricher {
 public:
  explicit PodNamesStage(k8s::PodNamesSpec spec) : names_(std::move(spec)) {}
  k8s::PodNames& names() { return names_; }
  bool enrich(Event& e) override {
    names_.enrich(e);
    return true;
  }
  std::string_view name() const override { return "pod-names"; }

 private:
  k8s::PodNames names_;
};

}  // namespace mcp::enrich
