#include "kube/list_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "kube/api_client.h"

namespace mcp::kube {
namespace {

using nlohmann::json;

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// "HTTP 403: pods is forbidden: ..." from a failed response (the API's Status message when
// the body is one), or the transport error.
std::string describe(const ApiResponse& r) {
  if (r.status == 0) return r.error;
  std::string msg;
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) msg = j["message"].get<std::string>();
  else msg = r.body.substr(0, 200);
  return "HTTP " + std::to_string(r.status) + (msg.empty() ? "" : ": " + msg);
}

std::string version_of(const json& object) {
  if (!object.is_object()) return {};
  const auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return {};
  const auto v = m->find("resourceVersion");
  return v != m->end() && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace

ListWatch::ListWatch(ApiConfig api, ListWatchOptions options, ListWatchHandlers handlers)
    : opt_(std::move(options)), handlers_(std::move(handlers)), client_(std::make_unique<ApiClient>(std::move(api))) {
  if (!opt_.log)
    opt_.log = [](bool warning, const std::string& line) {
      if (warning) spdlog::warn("{}", line);
      else spdlog::info("{}", line);
    };
}

ListWatch::~ListWatch() { stop(); }

void ListWatch::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void ListWatch::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  client_->stop();
  if (thread_.joinable()) thread_.join();
}

ListWatchStats ListWatch::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

bool ListWatch::wait_synced(std::chrono::milliseconds limit) const {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, limit, [&] { return stats_.lists > 0 || stopping_; }) && stats_.lists > 0;
}

bool ListWatch::sleep(std::chrono::milliseconds d) {
  std::unique_lock lk(mu_);
  return !cv_.wait_for(lk, d, [&] { return stopping_; });
}

void ListWatch::report(bool failure, const std::string& line) {
  {
    std::lock_guard lk(mu_);
    if (failure) {
      stats_.failures++;
      if (line == state_) return;
      state_ = line;
    } else {
      if (state_.empty()) return;
      state_.clear();
    }
  }
  opt_.log(failure, opt_.what + ": " + line);
}

std::string ListWatch::query(bool watch) const {
  std::string q;
  auto add = [&](const std::string& k, const std::string& v) { q += (q.empty() ? "?" : "&") + k + "=" + url_encode(v); };
  if (!opt_.field_selector.empty()) add("fieldSelector", opt_.field_selector);
  if (!opt_.label_selector.empty()) add("labelSelector", opt_.label_selector);
  if (watch) {
    add("watch", "1");
    add("allowWatchBookmarks", "true");
    add("resourceVersion", stats().resource_version);
    add("timeoutSeconds", std::to_string(opt_.watch_timeout_s));
  }
  return opt_.path + q;
}

bool ListWatch::list() {
  const ApiResponse r = client_->get(query(false));
  if (client_->stopped()) return false;
  if (r.status != 200) {
    report(true, "list failed: " + describe(r));
    return false;
  }
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("items") || !j["items"].is_array()) {
    report(true, "list failed: the response is not a list");
    return false;
  }
  std::vector<json> items(j["items"].begin(), j["items"].end());
  handlers_.on_list(items);
  // The recovery line goes out before the list counts, so whoever waits on wait_synced()
  // sees the log already saying so.
  report(false, "listed " + std::to_string(items.size()) + " object(s), watching again");
  {
    std::lock_guard lk(mu_);
    stats_.lists++;
    stats_.resource_version = version_of(j);
  }
  cv_.notify_all();
  return true;
}

ListWatch::WatchEnd ListWatch::watch() {
  bool gone = false;
  std::string failure;  // from an ERROR event or a line that is not an event
  const ApiResponse r = client_->stream_lines(query(true), opt_.watch_timeout_s + 15, [&](std::string_view line) {
    const json j = json::parse(line, nullptr, false);
    const auto t = j.is_object() ? j.find("type") : j.end();
    if (t == j.end() || !t->is_string() || !j.contains("object")) {
      failure = "watch sent a line that is not an event";
      return false;
    }
    const std::string type = t->get<std::string>();
    const json& object = j["object"];
    if (type == "ERROR") {
      const int code = object.is_object() && object.contains("code") && object["code"].is_number_integer()
                           ? object["code"].get<int>() : 0;
      if (code == 410) gone = true;
      else failure = "watch error event: " + describe({code, object.dump(), ""});
      return false;
    }
    const std::string rv = version_of(object);
    if (type == "BOOKMARK") {
      std::lock_guard lk(mu_);
      stats_.bookmarks++;
      if (!rv.empty()) stats_.resource_version = rv;
      return true;
    }
    report(false, "watching again");  // before the handler, for the same reason as in list()
    handlers_.on_event(type, object);
    {
      std::lock_guard lk(mu_);
      stats_.events++;
      if (!rv.empty()) stats_.resource_version = rv;
    }
    backoff_ = opt_.backoff_initial;
    return true;
  });
  if (r.status == 200) {
    std::lock_guard lk(mu_);
    stats_.watches++;
  }
  if (gone || r.status == 410) {
    std::lock_guard lk(mu_);
    stats_.gone++;
    return WatchEnd::kGone;
  }
  if (client_->stopped()) return WatchEnd::kFailed;
  if (!failure.empty()) {
    report(true, failure);
    return WatchEnd::kFailed;
  }
  if (r.status != 200) {
    report(true, "watch failed: " + describe(r));
    return WatchEnd::kFailed;
  }
  if (!r.error.empty()) {
    report(true, "watch dropped: " + r.error);
    return WatchEnd::kFailed;
  }
  return WatchEnd::kClosed;
}

void ListWatch::run() {
  backoff_ = opt_.backoff_initial;
  bool need_list = true;
  auto back_off = [&] {
    const bool more = sleep(backoff_);
    backoff_ = std::min(backoff_ * 2, opt_.backoff_max);
    return more;
  };
  while (sleep(std::chrono::milliseconds(0))) {
    if (need_list) {
      if (!list()) {
        if (!back_off()) return;
        continue;
      }
      backoff_ = opt_.backoff_initial;
      need_list = false;
    }
    switch (watch()) {
      case WatchEnd::kGone: need_list = true; break;  // at once: the version is simply too old
      case WatchEnd::kFailed: if (!back_off()) return; break;
      case WatchEnd::kClosed: break;
    }
  }
}

}  // namespace mcp::kube
