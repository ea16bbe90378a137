// TokenReviewer: per-node agent credentials in Kubernetes (issue 29). Each agent pod presents
// its own projected ServiceAccount token (audience `audience`, rotated by the kubelet); the
// broker asks the API server who it is (a TokenReview). A token that is authenticated for the
// audience, belongs to `service_account` ("system:serviceaccount:NS:NAME") and names its node
// (user.extra["authentication.kubernetes.io/node-name"], set for pod-bound tokens) gives that
// node's name; anything else gives nullopt. The broker then binds the publisher to
// "node:NAME" and lets it publish only as agent id NAME, so one agent cannot shadow or impersonate
// another, which a token shared by every agent could not prevent.
// Answers are cached by the token's SHA-256 for `cache_for` (negative ones too, so a flood of
// bad tokens costs one review each per period); one review at a time. Thread-safe.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kube/api_config.h"

namespace mcp::kube {
class ApiClient;
}

namespace mcp::broker {

struct TokenReviewOptions {
  kube::ApiConfig api;
  std::string audience = "mcp-broker";
  std::string service_account = "system:serviceaccount:mcp-system:mcp-agent";
  std::chrono::seconds cache_for{60};
};

class TokenReviewer {
 public:
  explicit TokenReviewer(TokenReviewOptions options);
  ~TokenReviewer();

  // The node the token's pod runs on, or nullopt (not ours, not valid, or the API unreachable:
  // logged, not cached).
  std::optional<std::string> node_of(std::string_view token);

 private:
  struct Answer {
    std::optional<std::string> node;
    std::chrono::steady_clock::time_point until;
  };
  TokenReviewOptions options_;
  std::mutex mu_;
  std::unique_ptr<kube::ApiClient> client_;
  std::unordered_map<std::string, Answer> cache_;  // SHA-256 of the token -> answer
};

}  // namespace mcp::broker
