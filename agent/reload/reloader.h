// Reloader: reads the configuration file, validates it whole, and swaps it into a
// ConfigStore, keeping counters an operator can scrape.
//   - A valid file that differs from the current one: the applier is called with
//     (current, next, diff) — attach added probes, detach removed ones, write sampling
//     changes to the kernel maps — and then `next` is published. If the applier throws,
//     the reload counts as failed and `next` is not published (the applier should leave
//     things as they were, or as close as it can, when it throws).
//   - An invalid file: nothing changes, failures and last_error are updated and every
//     diagnostic is logged; the previous configuration stays in force.
//   - A file whose content produces the same configuration: nothing is applied or
//     published (kUnchanged), so rewriting the file with a new comment is free.
//   - The same rejected content seen again (inotify reports one edit as several events) is
//     counted once; a forced reload (SIGHUP) always re-reads, logs and counts.
// reload() is thread-safe (calls are serialised) and never throws.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>

#include "reload/config_store.h"
#include "reload/diff.h"
#include "reload/watcher.h"

namespace mcp::reload {

struct ReloadStats {
  uint64_t successes = 0;   // reloads that published a new configuration
  uint64_t failures = 0;    // rejected files and applier errors
  uint64_t unchanged = 0;   // file events that produced the same configuration
  std::string last_error;   // first diagnostic of the latest failure; empty after a success
  std::chrono::system_clock::time_point last_success{};
  std::chrono::system_clock::time_point last_failure{};
};

enum class ReloadOutcome { kApplied, kUnchanged, kRejected };

class Reloader {
 public:
  using Applier = std::function<void(const ConfigSnapshot& before, const ConfigSnapshot& after, const ConfigDiff&)>;

  Reloader(std::filesystem::path file, ConfigStore& store, Applier applier = {});

  // Loads the file for the first time: throws config::ConfigError if it is invalid (the
  // daemon should then exit 2). Calls the applier with an empty `before` and publishes.
  ConfigSnapshot load_initial();

  // Re-reads the file. `force` (SIGHUP) disables the "same rejected content" short cut, so
  // the current verdict is always logged.
  ReloadOutcome reload(bool force = false);

  // Convenience for ConfigWatcher: reload(trigger == Trigger::kForced).
  void on_trigger(Trigger trigger) { reload(trigger == Trigger::kForced); }

  ReloadStats stats() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  ConfigStore& store_;
  Applier applier_;
  mutable std::mutex mu_;
  ReloadStats stats_;
  std::string last_rejected_;  // text of the last rejected file, to count each bad edit once
};

}  // namespace mcp::reload
