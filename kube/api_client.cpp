#include "kube/api_client.h"

#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace mcp::kube {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

ApiClient::ApiClient(ApiConfig config) : config_(std::move(config)) {
  http_ = std::make_unique<httplib::Client>(config_.server);
  http_->set_ca_cert_path(config_.ca_file);
  http_->enable_server_certificate_verification(true);
  http_->set_connection_timeout(5, 0);
  http_->set_keep_alive(false);
}

ApiClient::~ApiClient() { stop(); }

std::string ApiClient::token() {
  struct stat st {};
  if (stat(config_.token_file.c_str(), &st) != 0) return token_;  // keep the last one while it is swapped
  const FileId id{static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_size),
                  static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
  if (id == token_id_) return token_;
  std::ifstream in(config_.token_file);
  if (!in) return token_;
  std::stringstream ss;
  ss << in.rdbuf();
  token_ = trim(ss.str());
  token_id_ = id;
  return token_;
}

ApiResponse ApiClient::get(const std::string& target) { return run(target, 30, nullptr); }

ApiResponse ApiClient::stream_lines(const std::string& target, int read_timeout_s,
                                    const std::function<bool(std::string_view)>& on_line) {
  return run(target, read_timeout_s, &on_line);
}

template <typename Send>
ApiResponse ApiClient::exchange(int read_timeout_s, const Send& send) {
  ApiResponse out;
  {
    std::lock_guard lk(mu_);
    if (stopped_) {
      out.error = "stopped";
      return out;
    }
    in_flight_ = true;
  }
  httplib::Headers headers{{"Accept", "application/json"}};
  if (const std::string t = token(); !t.empty()) headers.emplace("Authorization", "Bearer " + t);
  http_->set_read_timeout(read_timeout_s, 0);
  bool cancelled = false;
  auto res = send(headers, out, cancelled);
  if (res) {
    out.status = res->status;
  } else {
    out.error = stopped_ ? "stopped" : cancelled ? "cancelled" : httplib::to_string(res.error());
    if (res.error() == httplib::Error::SSLServerVerification)
      out.error += " (the server's certificate is not signed by " + config_.ca_file + ")";
  }
  {
    std::lock_guard lk(mu_);
    in_flight_ = false;
  }
  done_.notify_all();
  return out;
}

ApiResponse ApiClient::run(const std::string& target, int read_timeout_s,
                           const std::function<bool(std::string_view)>* on_line) {
  return exchange(read_timeout_s, [&](const httplib::Headers& headers, ApiResponse& out, bool& cancelled) {
    std::string pending;  // a streamed line not complete yet
    auto on_response = [&](const httplib::Response& r) {
      out.status = r.status;
      return !stopped_;
    };
    auto on_data = [&](const char* data, size_t n) {
      if (stopped_) return false;
      if (!on_line || out.status != 200) {
        if (out.body.size() < kMaxErrorBody || !on_line) out.body.append(data, n);
        return true;
      }
      pending.append(data, n);
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (nl == start) continue;
        if (!(*on_line)(std::string_view(pending).substr(start, nl - start))) {
          cancelled = true;
          return false;
        }
      }
      pending.erase(0, start);
      return true;
    };
    return http_->Get(target, headers, on_response, on_data);
  });
}

ApiResponse ApiClient::post(const std::string& target, const std::string& body) {
  return write("POST", target, body, "application/json");
}

ApiResponse ApiClient::put(const std::string& target, const std::string& body) {
  return write("PUT", target, body, "application/json");
}

ApiResponse ApiClient::patch(const std::string& target, const std::string& body, const std::string& content_type) {
  return write("PATCH", target, body, content_type);
}

ApiResponse ApiClient::write(const char* method, const std::string& target, const std::string& body,
                             const std::string& content_type) {
  return exchange(30, [&](const httplib::Headers& headers, ApiResponse& out, bool&) {
    const std::string_view m(method);
    auto res = m == "POST"  ? http_->Post(target, headers, body, content_type)
               : m == "PUT" ? http_->Put(target, headers, body, content_type)
                            : http_->Patch(target, headers, body, content_type);
    if (res) out.body = res->body;
    return res;
  });
}

void ApiClient::stop() {
  std::unique_lock lk(mu_);
  stopped_ = true;
  // httplib's stop() shuts the socket of the request in flight; one that is still
  // connecting has no socket yet, so it is shut again until the request returns.
  while (in_flight_) {
    http_->stop();
    done_.wait_for(lk, std::chrono::milliseconds(50));
  }
}

}  // namespace mcp::kube
