// ConfigStore: the configuration currently in force, published as immutable snapshots.
// Readers take current() (one atomic shared_ptr load) and keep using that snapshot for as
// long as they hold it, so no reader ever sees half of an old and half of a new file.
// publish() swaps the whole snapshot atomically; version() counts publications (it is
// read separately from the pointer, so pair them only for monitoring, not for logic).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "config/config.h"

namespace mcp::reload {

using ConfigSnapshot = std::shared_ptr<const config::Config>;

class ConfigStore {
 public:
  explicit ConfigStore(ConfigSnapshot initial = nullptr) : current_(std::move(initial)) {}
  ConfigStore(const ConfigStore&) = delete;
  ConfigStore& operator=(const ConfigStore&) = delete;

  ConfigSnapshot current() const { return current_.load(std::memory_order_acquire); }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  // Makes `next` the current snapshot; returns the one it replaced.
  ConfigSnapshot publish(ConfigSnapshot next) {
    ConfigSnapshot prev = current_.exchange(std::move(next), std::memory_order_acq_rel);
    version_.fetch_add(1, std::memory_order_acq_rel);
    return prev;
  }

 private:
  std::atomic<ConfigSnapshot> current_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace mcp::reload
