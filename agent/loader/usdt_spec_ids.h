// UsdtSpecIds: the indexes into __bpf_usdt_specs of the agent's own USDT links (one spec per
// distinct argument string of a probe's sites). Taken at attach, given back once the link is
// closed and no site can read the spec any more. Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

namespace mcp::loader {

class UsdtSpecIds {
 public:
  explicit UsdtSpecIds(uint32_t capacity) : capacity_(capacity) {}
  // n free indexes; throws mcp::Error (runtime) naming how many are free when fewer are.
  std::vector<uint32_t> take(size_t n) {
    std::lock_guard lock(mu_);
    if (n > free_.size() + (capacity_ - next_))
      throw runtime_error("USDT specs are full: " + std::to_string(n) + " more wanted, " +
                          std::to_string(free_.size() + (capacity_ - next_)) + " of " + std::to_string(capacity_) +
                          " free (detach other USDT probes)");
    std::vector<uint32_t> out;
    while (out.size() < n) {
      if (free_.empty()) {
        out.push_back(next_++);
      } else {
        out.push_back(free_.back());
        free_.pop_back();
      }
    }
    return out;
  }
  void give_back(const std::vector<uint32_t>& ids) {
    std::lock_guard lock(mu_);
    free_.insert(free_.end(), ids.begin(), ids.end());
  }

 private:
  std::mutex mu_;
  const uint32_t capacity_;
  uint32_t next_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace mcp::loader
