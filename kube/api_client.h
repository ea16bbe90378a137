// ApiClient: GET requests to the Kubernetes API over TLS (the server's certificate checked
// against the configured CA bundle), authenticated with the bearer token from the token
// file, which is read again whenever the file changes (inode, size or mtime: the kubelet
// swaps a projected token's symlink when it rotates it).
// Writes (PUT, PATCH) send a JSON body and return the whole response body, e.g. a status
// subresource update (the SamplingPolicy controller, broker/k8s/policy_controller.h).
// One request at a time (a ListWatch owns one client on its thread); stop() may be called
// from any thread: it aborts the request in flight and makes every later one fail at once.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kube/api_config.h"

namespace httplib {
class Client;
}

namespace mcp::kube {

struct ApiResponse {
  int status = 0;     // HTTP status; 0 when no response came (error says why)
  std::string body;   // the body (a get), or the first 64 KiB of a failed stream's body
  std::string error;  // transport failure or abort; empty when a response came complete
};

class ApiClient {
 public:
  explicit ApiClient(ApiConfig config);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // `target` is a path with its query string, e.g. "/api/v1/pods?fieldSelector=...".
  ApiResponse get(const std::string& target);
  // A streamed GET (a watch): each complete line of a 200 response goes to on_line as it
  // arrives; returns when the server ends the body, the connection drops or times out
  // (error set), on_line returns false (error "cancelled") or stop() is called.
  ApiResponse stream_lines(const std::string& target, int read_timeout_s,
                           const std::function<bool(std::string_view line)>& on_line);
  // POST `body` (application/json) to `target`, e.g. a TokenReview.
  ApiResponse post(const std::string& target, const std::string& body);
  // PUT `body` (application/json) to `target`.
  ApiResponse put(const std::string& target, const std::string& body);
  // PATCH `target` with `body` of `content_type` (a JSON merge patch by default).
  ApiResponse patch(const std::string& target, const std::string& body,
                    const std::string& content_type = "application/merge-patch+json");
  void stop();
  bool stopped() const { return stopped_.load(); }
  const ApiConfig& config() const { return config_; }

 private:
  std::string token();  // the token file's content, re-read when the file changed
  // One request, refused once stopped and abortable by stop() while in flight: send(headers,
  // out, cancelled) issues it and returns httplib's result. Defined in the .cpp, its only user.
  template <typename Send>
  ApiResponse exchange(int read_timeout_s, const Send& send);
  ApiResponse run(const std::string& target, int read_timeout_s,
                  const std::function<bool(std::string_view)>* on_line);
  ApiResponse write(const char* method, const std::string& target, const std::string& body,
                    const std::string& content_type);

  ApiConfig config_;
  std::unique_ptr<httplib::Client> http_;
  std::string token_;
  struct FileId {
    unsigned long long ino = 0, size = 0;
    long long mtime_ns = -1;
    bool operator==(const FileId&) const = default;
  } token_id_;
  std::atomic<bool> stopped_{false};
  std::mutex mu_;  // in_flight_
  std::condition_variable done_;
  bool in_flight_ = false;
};

}  // namespace mcp::kube
