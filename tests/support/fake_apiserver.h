// Test support: a stand-in for the Kubernetes API server's pod endpoint (there is no
// kube-apiserver in Debian), faithful where the list/watch protocol is concerned:
//   GET /api/v1/pods                        a PodList at the current resourceVersion
//   GET /api/v1/pods?watch=1&resourceVersion=RV[&allowWatchBookmarks=true]
//       a chunked stream of JSON lines {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
//       "object": ...} for every change after RV, then each new one as it happens;
//       RV older than the last compact(): 410 Gone, as the HTTP status or as an ERROR
//       event with code 410 (set_gone_as), as the real server does depending on where
//       it notices; RV "" or "0": synthetic ADDED for every pod first
//   fieldSelector=spec.nodeName=NAME filters both (any other field selector: 400)
//   a bearer token other than token(): 401 with a Status body
// over TLS (httplib::SSLServer on 127.0.0.1, port 0) with a self-signed certificate for
// IP 127.0.0.1 made by the `openssl` CLI (available() says whether it can run).
// Every change bumps the resourceVersion; bookmark() sends a BOOKMARK at the current
// version to every watch that allowed them; drop_watches() closes every open watch
// connection mid-stream (no terminating chunk), as a dying apiserver or proxy does.
// SamplingPolicies (sampling.mcp.dev/v1alpha1) are served the same way, cluster-wide, in the
// same resourceVersion sequence as the pods (one etcd revision for every kind, as the real
// server has):
//   GET /apis/sampling.mcp.dev/v1alpha1/samplingpolicies[?watch=1&resourceVersion=RV...]
//   PATCH (merge patch) or PUT /apis/sampling.mcp.dev/v1alpha1/namespaces/NS/samplingpolicies/
//       NAME/status: replaces .status only (a PUT whose metadata.resourceVersion is stale:
//       409 Conflict), bumps the resourceVersion, not the generation, and sends MODIFIED, as
//       the status subresource does; every write is recorded (status_writes()).
// put_policy() bumps metadata.generation when the spec changed, as the server does.
//   POST /apis/authentication.k8s.io/v1/tokenreviews (the caller's own token must be token()):
//       201 with status {authenticated, user {username, extra {authentication.kubernetes.io/
//       node-name}}, audiences} for a token given to add_pod_token() whose audience was asked
//       for, {authenticated: false} for any other, as the server's TokenReview API answers.
// Every request is recorded (path, parameters, Authorization). Header-only.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"

namespace mcp::test {

class FakeApiServer {
 public:
  using json = nlohmann::json;
  enum class GoneAs { kHttpStatus, kErrorEvent };
  struct Request {
    std::string path;
    std::map<std::string, std::string> params;
    std::string authorization;
    bool watch() const { return params.count("watch") && params.at("watch") != "0" && params.at("watch") != "false"; }
    std::string param(const std::string& k) const { return params.count(k) ? params.at(k) : ""; }
  };

  // Whether the openssl CLI is there to make the certificate.
  static bool available() { return run_command({"/bin/sh", "-c", "command -v openssl"}).exit_code == 0; }

  // Certificate, key and token file are written to `dir` (created).
  explicit FakeApiServer(const std::filesystem::path& dir, std::string token = "test-token-1")
      : dir_(dir), token_(std::move(token)) {
    std::filesystem::create_directories(dir_);
    const auto r = run_command({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                "-nodes", "-keyout", (dir_ / "apiserver.key").string(), "-out", ca_file(), "-days", "2",
                                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"});
    if (r.exit_code != 0) throw std::runtime_error("openssl req failed: " + r.err);
    write_token(token_);
    server_ = std::make_unique<httplib::SSLServer>(ca_file().c_str(), (dir_ / "apiserver.key").c_str());
    if (!server_->is_valid()) throw std::runtime_error("SSLServer rejected the certificate");
    server_->Get("/api/v1/pods", [this](const httplib::Request& req, httplib::Response& res) { pods(req, res); });
    server_->Get(kPolicies, [this](const httplib::Request& req, httplib::Response& res) { serve(req, res, "SamplingPolicy"); });
    const std::string status_path =
        "/apis/sampling.mcp.dev/v1alpha1/namespaces/([^/]+)/samplingpolicies/([^/]+)/status";
    server_->Patch(status_path, [this](const httplib::Request& req, httplib::Response& res) { write_status(req, res, false); });
    server_->Put(status_path, [this](const httplib::Request& req, httplib::Response& res) { write_status(req, res, true); });
    server_->Post("/apis/authentication.k8s.io/v1/tokenreviews",
                  [this](const httplib::Request& req, httplib::Response& res) { review(req, res); });
    port_ = server_->bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("bind 127.0.0.1:0 failed");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::yield();
  }
  ~FakeApiServer() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::string ca_file() const { return (dir_ / "apiserver.crt").string(); }
  std::string token_file() const { return (dir_ / "token").string(); }
  // Writes the token file the client reads (atomically, as the kubelet does).
  void write_token(const std::string& t) const {
    std::ofstream(token_file() + ".tmp") << t << "\n";
    std::filesystem::rename(token_file() + ".tmp", token_file());
  }
  // The token the server accepts from now on.
  void accept_token(const std::string& t) {
    std::lock_guard lk(mu_);
    token_ = t;
  }
  // A pod-bound ServiceAccount token, as the kubelet projects it into the pod.
  void add_pod_token(const std::string& token, const std::string& username, const std::string& node,
                     const std::string& audience) {
    std::lock_guard lk(mu_);
    pod_tokens_[token] = {{"username", username}, {"node", node}, {"audience", audience}};
  }

  void set_gone_as(GoneAs g) {
    std::lock_guard lk(mu_);
    gone_as_ = g;
  }

  // A pod as the API server returns it; containers: name -> runtime id (containerd).
  static json make_pod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                       const std::map<std::string, std::string>& labels = {},
                       const std::vector<std::pair<std::string, std::string>>& containers = {}) {
    json statuses = json::array();
    for (const auto& [cname, id] : containers)
      statuses.push_back({{"name", cname}, {"containerID", "containerd://" + id}, {"ready", true}});
    json l = json::object();
    for (const auto& [k, v] : labels) l[k] = v;
    return {{"kind", "Pod"},
            {"apiVersion", "v1"},
            {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}, {"labels", l}}},
            {"spec", {{"nodeName", node}}},
            {"status", {{"phase", "Running"}, {"containerStatuses", statuses}}}};
  }

  // Adds (or replaces, as MODIFIED) a pod; returns the new resourceVersion.
  uint64_t put_pod(json pod) {
    std::lock_guard lk(mu_);
    const std::string uid = pod["metadata"]["uid"];
    const bool known = pods_.count(uid) > 0;
    pod["metadata"]["resourceVersion"] = std::to_string(++rv_);
    pods_[uid] = pod;
    history_.push_back({rv_, known ? "MODIFIED" : "ADDED", pod});
    cv_.notify_all();
    return rv_;
  }
  static constexpr const char* kPolicies = "/apis/sampling.mcp.dev/v1alpha1/samplingpolicies";
  struct StatusWrite {
    std::string ns, name, method, body;  // method "PATCH" or "PUT"; body as received
    int status = 0;                      // what the server answered
  };

  // A SamplingPolicy as the API server returns it (uid "uid-NS-NAME").
  static json make_policy(const std::string& ns, const std::string& name, const json& spec) {
    return {{"kind", "SamplingPolicy"},
            {"apiVersion", "sampling.mcp.dev/v1alpha1"},
            {"metadata", {{"name", name}, {"namespace", ns}, {"uid", "uid-" + ns + "-" + name}}},
            {"spec", spec}};
  }
  // Adds or replaces (MODIFIED) a policy, keeping its status; generation 1 on create, +1
  // when the spec changed. Returns the new resourceVersion.
  uint64_t put_policy(json policy) {
    std::lock_guard lk(mu_);
    const std::string uid = policy["metadata"]["uid"];
    const auto old = policies_.find(uid);
    int64_t generation = 1;
    if (old != policies_.end()) {
      generation = old->second["metadata"].value("generation", int64_t{1}) + (old->second["spec"] != policy["spec"] ? 1 : 0);
      if (old->second.contains("status")) policy["status"] = old->second["status"];
    }
    policy["metadata"]["generation"] = generation;
    policy["metadata"]["resourceVersion"] = std::to_string(++rv_);
    policies_[uid] = policy;
    history_.push_back({rv_, old != policies_.end() ? "MODIFIED" : "ADDED", policy});
    cv_.notify_all();
    return rv_;
  }
  uint64_t delete_policy(const std::string& ns, const std::string& name) {
    std::lock_guard lk(mu_);
    json p = policies_.at("uid-" + ns + "-" + name);
    policies_.erase("uid-" + ns + "-" + name);
    p["metadata"]["resourceVersion"] = std::to_string(++rv_);
    history_.push_back({rv_, "DELETED", p});
    cv_.notify_all();
    return rv_;
  }
  // The stored object (null when absent).
  json policy(const std::string& ns, const std::string& name) const {
    std::lock_guard lk(mu_);
    const auto it = policies_.find("uid-" + ns + "-" + name);
    return it == policies_.end() ? json() : it->second;
  }
  std::vector<StatusWrite> status_writes() const {
    std::lock_guard lk(mu_);
    return status_writes_;
  }

  uint64_t delete_pod(const std::string& uid) {
    std::lock_guard lk(mu_);
    json pod = pods_.at(uid);
    pods_.erase(uid);
    pod["metadata"]["resourceVersion"] = std::to_string(++rv_);
    history_.push_back({rv_, "DELETED", pod});
    cv_.notify_all();
    return rv_;
  }
  // A BOOKMARK at the current version to every open watch that allowed bookmarks.
  void bookmark() {
    std::lock_guard lk(mu_);
    history_.push_back({rv_, "BOOKMARK", {{"kind", "Pod"}, {"apiVersion", "v1"},
                                          {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}});
    cv_.notify_all();
  }
  // Every version before the current one is compacted away: watches from them get 410.
  void compact() {
    std::lock_guard lk(mu_);
    compacted_ = rv_;
  }
  void drop_watches() {
    std::lock_guard lk(mu_);
    drop_epoch_++;
    cv_.notify_all();
  }
  uint64_t resource_version() const {
    std::lock_guard lk(mu_);
    return rv_;
  }
  int open_watches() const {
    std::lock_guard lk(mu_);
    return open_watches_;
  }
  std::vector<Request> requests() const {
    std::lock_guard lk(mu_);
    return requests_;
  }

 private:
  struct Change {
    uint64_t rv;
    std::string type;
    json object;
  };
  struct Watch {
    size_t cursor = 0;
    uint64_t epoch = 0;
    bool bookmarks = false;
    std::string node;         // empty: every node
    std::string kind = "Pod";
    std::string first_lines;  // synthetic ADDED, or the ERROR 410
    bool end_after_first = false;
  };

  static json status(int code, const std::string& reason, const std::string& message) {
    return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"}, {"message", message},
            {"reason", reason}, {"code", code}};
  }
  static bool on_node(const json& pod, const std::string& node) {
    return node.empty() || pod["spec"].value("nodeName", "") == node;
  }

  void pods(const httplib::Request& req, httplib::Response& res) { serve(req, res, "Pod"); }
  std::map<std::string, json>& objects(const std::string& kind) { return kind == "Pod" ? pods_ : policies_; }
  static bool of_kind(const Change& c, const std::string& kind) {
    return c.type == "BOOKMARK" || c.object.value("kind", "") == kind;
  }

  // list and watch of `kind` (Pod or SamplingPolicy); the node field selector only for pods.
  void serve(const httplib::Request& req, httplib::Response& res, const std::string& kind) {
    Request r{req.path, {}, req.get_header_value("Authorization")};
    for (const auto& [k, v] : req.params) r.params[k] = v;
    std::unique_lock lk(mu_);
    requests_.push_back(r);
    if (r.authorization != "Bearer " + token_) {
      res.status = 401;
      res.set_content(status(401, "Unauthorized", "Unauthorized").dump(), "application/json");
      return;
    }
    std::string node;
    if (const std::string fs = r.param("fieldSelector"); !fs.empty()) {
      if (kind != "Pod" || fs.rfind("spec.nodeName=", 0) != 0) {
        res.status = 400;
        res.set_content(status(400, "BadRequest", "field label not supported: " + fs).dump(), "application/json");
        return;
      }
      node = fs.substr(strlen("spec.nodeName="));
    }
    if (!r.watch()) {
      json items = json::array();
      for (const auto& [uid, pod] : objects(kind))
        if (on_node(pod, node)) items.push_back(pod);
      res.set_content(json{{"kind", kind + "List"}, {"apiVersion", kind == "Pod" ? "v1" : "sampling.mcp.dev/v1alpha1"},
                           {"metadata", {{"resourceVersion", std::to_string(rv_)}}}, {"items", items}}
                          .dump(),
                      "application/json");
      return;
    }
    auto w = std::make_shared<Watch>();
    w->epoch = drop_epoch_;
    w->bookmarks = r.param("allowWatchBookmarks") == "true";
    w->node = node;
    w->kind = kind;
    const std::string from = r.param("resourceVersion");
    const uint64_t from_rv = from.empty() ? 0 : std::stoull(from);
    if (from_rv == 0) {
      for (const auto& [uid, pod] : objects(kind))
        if (on_node(pod, node)) w->first_lines += json{{"type", "ADDED"}, {"object", pod}}.dump() + "\n";
      w->cursor = history_.size();
    } else if (from_rv < compacted_) {
      const json gone = status(410, "Expired", "too old resource version: " + from + " (" + std::to_string(compacted_) + ")");
      if (gone_as_ == GoneAs::kHttpStatus) {
        res.status = 410;
        res.set_content(gone.dump(), "application/json");
        return;
      }
      w->first_lines = json{{"type", "ERROR"}, {"object", gone}}.dump() + "\n";
      w->end_after_first = true;
      w->cursor = history_.size();
    } else {
      while (w->cursor < history_.size() && history_[w->cursor].rv <= from_rv) w->cursor++;
    }
    open_watches_++;
    res.set_chunked_content_provider(
        "application/json",
        [this, w](size_t, httplib::DataSink& sink) {
          std::string out;
          {
            std::unique_lock lk(mu_);
            if (!w->first_lines.empty()) {
              out.swap(w->first_lines);
            } else {
              cv_.wait(lk, [&] { return stopping_ || drop_epoch_ != w->epoch || w->cursor < history_.size(); });
              if (stopping_ || drop_epoch_ != w->epoch) return false;  // the connection closes mid-stream
              for (; w->cursor < history_.size(); w->cursor++) {
                const Change& c = history_[w->cursor];
                if (!of_kind(c, w->kind) || (c.type == "BOOKMARK" ? !w->bookmarks : !on_node(c.object, w->node))) continue;
                out += json{{"type", c.type}, {"object", c.object}}.dump() + "\n";
              }
            }
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (w->end_after_first) sink.done();
          return true;
        },
        [this](bool) {
          std::lock_guard lk(mu_);
          open_watches_--;
        });
  }

  void review(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lk(mu_);
    requests_.push_back(Request{req.path, {}, req.get_header_value("Authorization")});
    if (req.get_header_value("Authorization") != "Bearer " + token_) {
      res.status = 401;
      res.set_content(status(401, "Unauthorized", "Unauthorized").dump(), "application/json");
      return;
    }
    const json body = json::parse(req.body, nullptr, false);
    json out = {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}};
    out["status"] = {{"authenticated", false}};
    if (body.is_object() && body.contains("spec")) {
      const json spec = body["spec"];
      const auto it = pod_tokens_.find(spec.value("token", ""));
      const json asked = spec.value("audiences", json::array());
      if (it != pod_tokens_.end() && std::find(asked.begin(), asked.end(), it->second["audience"]) != asked.end()) {
        out["status"] = {{"authenticated", true},
                         {"audiences", json::array({it->second["audience"]})},
                         {"user", {{"username", it->second["username"]},
                                   {"extra", {{"authentication.kubernetes.io/node-name", json::array({it->second["node"]})}}}}}};
      }
    }
    res.status = 201;
    res.set_content(out.dump(), "application/json");
  }

  void write_status(const httplib::Request& req, httplib::Response& res, bool put) {
    const std::string ns = req.matches[1], name = req.matches[2];
    std::unique_lock lk(mu_);
    requests_.push_back(Request{req.path, {}, req.get_header_value("Authorization")});
    StatusWrite w{ns, name, put ? "PUT" : "PATCH", req.body};
    auto answer = [&](int code, const json& body) {
      res.status = w.status = code;
      res.set_content(body.dump(), "application/json");
      status_writes_.push_back(w);
    };
    if (req.get_header_value("Authorization") != "Bearer " + token_)
      return answer(401, status(401, "Unauthorized", "Unauthorized"));
    const auto it = policies_.find("uid-" + ns + "-" + name);
    if (it == policies_.end())
      return answer(404, status(404, "NotFound", "samplingpolicies \"" + name + "\" not found"));
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return answer(400, status(400, "BadRequest", "the body is not a JSON object"));
    if (put && req.get_header_value("Content-Type") != "application/json")
      return answer(415, status(415, "UnsupportedMediaType", "PUT takes application/json"));
    if (!put && req.get_header_value("Content-Type") != "application/merge-patch+json" &&
        req.get_header_value("Content-Type") != "application/json-patch+json")
      return answer(415, status(415, "UnsupportedMediaType", "unsupported patch type"));
    json& obj = it->second;
    if (put) {
      const std::string want = body["metadata"].value("resourceVersion", "");
      if (!want.empty() && want != obj["metadata"].value("resourceVersion", ""))
        return answer(409, status(409, "Conflict", "the object has been modified"));
      obj["status"] = body.value("status", json::object());
    } else {
      if (!body.contains("status")) return answer(200, obj);  // nothing for this subresource
      json merged = obj.value("status", json::object());
      merged.merge_patch(body["status"]);
      obj["status"] = merged;
    }
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    history_.push_back({rv_, "MODIFIED", obj});
    cv_.notify_all();
    answer(200, obj);
  }

  std::filesystem::path dir_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string token_;
  GoneAs gone_as_ = GoneAs::kHttpStatus;
  uint64_t rv_ = 1000;
  uint64_t compacted_ = 0;
  uint64_t drop_epoch_ = 0;
  bool stopping_ = false;
  int open_watches_ = 0;
  std::map<std::string, json> pods_;  // by uid
  std::map<std::string, json> policies_;  // by uid
  std::map<std::string, json> pod_tokens_;  // token -> {username, node, audience}
  std::vector<StatusWrite> status_writes_;
  std::vector<Change> history_;
  std::vector<Request> requests_;
};

}  // namespace mcp::test
