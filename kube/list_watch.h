// ListWatch: keeps a consumer's view of one kind of Kubernetes object in step with the API
// server (client-go's reflector, without a store of its own):
//   list (GET path?fieldSelector=..) -> on_list(every item): the consumer replaces its view
//   -> watch from the list's resourceVersion with allowWatchBookmarks -> on_event(type, object)
//      for ADDED, MODIFIED and DELETED; a BOOKMARK only advances the version
//   -> the watch ends (timeoutSeconds) or drops: watch again from the last version seen
//      (after a backoff when it failed); 410 Gone (as the HTTP status, or as an ERROR event
//      with code 410: the version was compacted away) -> list again; a failed list ->
//      list again after a backoff (doubling from backoff_initial to backoff_max, reset by
//      a successful list or a watch event).
// Failures are logged once per change of state: a list refused every backoff for an hour is
// one line, and so is its recovery. Runs on its own thread from start() to stop(); the
// handlers run on that thread. Pages of a list are not requested (limit/continue): the whole
// list comes in one response, fine for a node's pods, not for a cluster's.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/api_config.h"

namespace mcp::kube {

class ApiClient;

struct ListWatchOptions {
  std::string path;            // the collection, e.g. "/api/v1/pods"
  std::string field_selector;  // e.g. "spec.nodeName=node-1"; empty: none
  std::string label_selector;  // empty: none
  std::string what = "watch";  // names the stream in log lines, e.g. "pod watch"
  int watch_timeout_s = 300;   // timeoutSeconds asked of each watch request
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30000};
  // Log lines (warnings for failures, info for recoveries); default: spdlog.
  std::function<void(bool warning, const std::string& line)> log;
};

struct ListWatchHandlers {
  std::function<void(const std::vector<nlohmann::json>& items)> on_list;  // the full current set
  std::function<void(std::string_view type, const nlohmann::json& object)> on_event;
};

struct ListWatchStats {
  uint64_t lists = 0;          // successful lists
  uint64_t watches = 0;        // watch requests answered 200
  uint64_t events = 0;         // ADDED / MODIFIED / DELETED handed on
  uint64_t bookmarks = 0;
  uint64_t gone = 0;           // 410s (status or ERROR event) that forced a list
  uint64_t failures = 0;       // failed requests (transport, HTTP status, bad JSON)
  std::string resource_version;  // the last version seen
};

class ListWatch {
 public:
  ListWatch(ApiConfig api, ListWatchOptions options, ListWatchHandlers handlers);
  ~ListWatch();  // stop()
  ListWatch(const ListWatch&) = delete;
  ListWatch& operator=(const ListWatch&) = delete;

  void start();
  void stop();  // aborts the request in flight; joins the thread
  ListWatchStats stats() const;
  // Waits until the first list has been handed to on_list (true) or `limit` passes (false).
  bool wait_synced(std::chrono::milliseconds limit) const;

 private:
  void run();
  bool list();                       // false: failed (logged, backoff due)
  enum class WatchEnd { kClosed, kGone, kFailed };
  WatchEnd watch();
  void report(bool failure, const std::string& line);
  bool sleep(std::chrono::milliseconds d);  // false when stopped
  std::string query(bool watch) const;

  ListWatchOptions opt_;
  ListWatchHandlers handlers_;
  std::unique_ptr<ApiClient> client_;
  std::thread thread_;
  mutable std::mutex mu_;  // stats_, stopping_, state_
  mutable std::condition_variable cv_;
  bool stopping_ = false;
  ListWatchStats stats_;
  std::string state_;      // the last line logged
  std::chrono::milliseconds backoff_{0};  // run thread only
};

}  // namespace mcp::kube
