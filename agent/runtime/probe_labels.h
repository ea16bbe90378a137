// ProbeLabels: what the runtime stamps on each event of a probe (service, tags, the CUDA
// API name), looked up by probe id on the consumer thread. ProbeSet (configured probes)
// rewrites them on reload (each a swapped immutable value); `trace` fills a LabelTable
// once for its flag probes, and chains the two with --config.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mcp::runtime {

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

// Labels fixed before the run: one default for every probe, overridden per probe id.
class LabelTable final : public ProbeLabels {
 public:
  explicit LabelTable(ProbeMeta fallback) : fallback_(std::make_shared<const ProbeMeta>(std::move(fallback))) {}
  void set(uint32_t probe_id, ProbeMeta meta) {
    if (probe_id >= by_id_.size()) by_id_.resize(probe_id + 1);
    by_id_[probe_id] = std::make_shared<const ProbeMeta>(std::move(meta));
  }
  const ProbeMeta& fallback() const { return *fallback_; }
  std::shared_ptr<const ProbeMeta> meta(uint32_t probe_id) const override {
    return probe_id < by_id_.size() && by_id_[probe_id] ? by_id_[probe_id] : fallback_;
  }

 private:
  std::shared_ptr<const ProbeMeta> fallback_;
  std::vector<std::shared_ptr<const ProbeMeta>> by_id_;
};

// The first source that knows the probe: configured probes (ProbeSet, null for ids it does
// not own) before a LabelTable's fallback. Both must outlive the chain.
class LabelChain final : public ProbeLabels {
 public:
  LabelChain(const ProbeLabels& first, const ProbeLabels& second) : first_(first), second_(second) {}
  std::shared_ptr<const ProbeMeta> meta(uint32_t probe_id) const override {
    auto m = first_.meta(probe_id);
    return m ? m : second_.meta(probe_id);
  }

 private:
  const ProbeLabels& first_;
  const ProbeLabels& second_;
};

}  // namespace mcp::runtime
