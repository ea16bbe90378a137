// ConfigWatcher: tells its owner when the configuration file may have changed.
// It watches the file's *directory* with inotify (a watch on the file itself would follow
// the old inode), which covers:
//   - the kubelet's ConfigMap update: a new `..2026_..` directory, a `..data_tmp` symlink
//     renamed over `..data` (agent.yaml -> ..data/agent.yaml stays put);
//   - plain edits (close after write) and editors that rename a temp file over the file;
//   - other files in the directory, such as a compliance rules file mounted beside it.
// Events are debounced (one callback after the directory has been quiet for `debounce`),
// so a burst of writes gives one reload. trigger() asks for a forced reload; it only writes
// to an eventfd, so it is async-signal-safe and install_sighup_trigger() calls it from a
// SIGHUP handler. The callback runs on the watcher's own thread, one call at a time; the
// owner decides whether anything really changed (see Reloader).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <string_view>
#include <thread>

namespace mcp::reload {

enum class Trigger { kFileEvent, kForced };

class ConfigWatcher;
void install_sighup_trigger(ConfigWatcher& watcher);

class ConfigWatcher {
 public:
  using Callback = std::function<void(Trigger)>;
  struct Options {
    std::chrono::milliseconds debounce{50};
  };

  // Throws mcp::Error (runtime) when the directory cannot be watched.
  ConfigWatcher(std::filesystem::path config_file, Callback on_change, Options options);
  ConfigWatcher(std::filesystem::path config_file, Callback on_change)
      : ConfigWatcher(std::move(config_file), std::move(on_change), Options{}) {}
  ~ConfigWatcher();
  ConfigWatcher(const ConfigWatcher&) = delete;
  ConfigWatcher& operator=(const ConfigWatcher&) = delete;

  void trigger() noexcept;  // async-signal-safe
  // Whether an event on directory entry `name` may change the configuration: kubelet
  // bookkeeping (`..2026_..`, `..data_tmp`) and editor swap files do not; `..data` does.
  static bool relevant(std::string_view name);
  const std::filesystem::path& directory() const { return dir_; }

 private:
  friend void install_sighup_trigger(ConfigWatcher& watcher);
  void run();

  std::filesystem::path dir_;
  Callback on_change_;
  Options options_;
  int inotify_fd_ = -1;
  int trigger_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

// Routes SIGHUP to watcher.trigger() (one watcher per process; a later call replaces the
// earlier one). remove_sighup_trigger() restores the default action.
void install_sighup_trigger(ConfigWatcher& watcher);
void remove_sighup_trigger();

}  // namespace mcp::reload
