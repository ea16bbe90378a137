#include "reload/reloader.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/parse_config.h"

namespace mcp::reload {

namespace {
const config::Config& empty_config() {
  static const config::Config kEmpty = [] {
    config::Config c;
    c.metrics_listen.clear();  // so a first load reports metrics as changed too
    return c;
  }();
  return kEmpty;
}

// What the "same bad edit" check compares: the file's owner and mode (a chmod that fixes a
// file refused as writable by others is a new edit) and its text; empty on error (the loader
// reports it).
std::string slurp(const std::filesystem::path& p) {
  struct stat st{};
  if (stat(p.c_str(), &st) != 0) return "";
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << st.st_uid << ':' << st.st_gid << ':' << st.st_mode << '\n' << in.rdbuf();
  return ss.str();
}
}  // namespace

Reloader::Reloader(std::filesystem::path file, ConfigStore& store, Applier applier)
    : file_(std::move(file)), store_(store), applier_(std::move(applier)) {}

ConfigSnapshot Reloader::load_initial() {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<const config::Config>(config::load_config(file_));
  const ConfigDiff d = diff(empty_config(), *next);
  if (applier_) applier_(nullptr, next, d);
  store_.publish(next);
  ++stats_.successes;
  stats_.last_success = std::chrono::system_clock::now();
  spdlog::info("config: loaded {} ({} probes, {} compliance rules)", file_.string(), next->probes.size(),
               next->compliance.rules->size());
  return next;
}

ReloadOutcome Reloader::reload(bool force) {
  std::lock_guard lock(mu_);
  const ConfigSnapshot before = store_.current();
  // Another event for an edit already rejected (one `mv` can bring two, and a file whose
  // probes cannot attach was counted and logged twice) changes nothing; SIGHUP retries.
  const std::string text = slurp(file_);
  if (!force && !last_rejected_.empty() && text == last_rejected_) return ReloadOutcome::kRejected;
  const auto reject = [&] { last_rejected_ = text.empty() ? std::string("\0", 1) : text; };
  std::shared_ptr<const config::Config> next;
  try {
    next = std::make_shared<const config::Config>(config::load_config(file_));
  } catch (const config::ConfigError& e) {
    reject();
    ++stats_.failures;
    stats_.last_error = e.what();
    stats_.last_failure = std::chrono::system_clock::now();
    for (const auto& d : e.diagnostics()) spdlog::error("config: rejected: {}", d.str());
    spdlog::error("config: keeping the previous configuration ({} reload failures so far)", stats_.failures);
    return ReloadOutcome::kRejected;
  } catch (const std::exception& e) {
    ++stats_.failures;
    stats_.last_error = e.what();
    stats_.last_failure = std::chrono::system_clock::now();
    spdlog::error("config: reload failed: {}", e.what());
    return ReloadOutcome::kRejected;
  }
  last_rejected_.clear();
  const ConfigDiff d = diff(before ? *before : empty_config(), *next);
  if (before && d.empty()) {
    ++stats_.unchanged;
    return ReloadOutcome::kUnchanged;
  }
  if (applier_) {
    try {
      applier_(before, next, d);
    } catch (const std::exception& e) {
      reject();
      ++stats_.failures;
      stats_.last_error = std::string("applying ") + file_.string() + ": " + e.what();
      stats_.last_failure = std::chrono::system_clock::now();
      spdlog::error("config: {}; keeping the previous configuration", stats_.last_error);
      return ReloadOutcome::kRejected;
    }
  }
  store_.publish(next);
  ++stats_.successes;
  stats_.last_error.clear();
  stats_.last_success = std::chrono::system_clock::now();
  spdlog::info("config: reloaded {}: +{} -{} probes, {} sampling changes, {} unchanged{}", file_.string(),
               d.added.size(), d.removed.size(), d.sampling_changed.size(), d.unchanged.size(),
               d.rules_changed ? ", compliance rules changed" : "");
  return ReloadOutcome::kApplied;
}

ReloadStats Reloader::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace mcp::reload
