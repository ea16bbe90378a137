#include "broker/k8s/token_review.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "broker/net/access.h"
#include "kube/api_client.h"

namespace mcp::broker {
namespace {

constexpr size_t kMaxCached = 100000;  // past it the cache starts over (distinct bad tokens)
constexpr const char* kNodeNameKey = "authentication.kubernetes.io/node-name";

}  // namespace

TokenReviewer::TokenReviewer(TokenReviewOptions options)
    : options_(std::move(options)), client_(std::make_unique<kube::ApiClient>(options_.api)) {}

TokenReviewer::~TokenReviewer() = default;

std::optional<std::string> TokenReviewer::node_of(std::string_view token) {
  if (token.empty()) return std::nullopt;
  const std::string key = token_identity(token);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (const auto it = cache_.find(key); it != cache_.end() && it->second.until > now) return it->second.node;
  const nlohmann::json review = {
      {"apiVersion", "authentication.k8s.io/v1"},
      {"kind", "TokenReview"},
      {"spec", {{"token", token}, {"audiences", {options_.audience}}}}};
  const kube::ApiResponse r = client_->post("/apis/authentication.k8s.io/v1/tokenreviews", review.dump());
  if (r.status != 201 && r.status != 200) {
    spdlog::warn("token review: the API server answered {} {}", r.status, r.error.empty() ? r.body.substr(0, 200) : r.error);
    return std::nullopt;  // not cached: the next stream asks again
  }
  std::optional<std::string> node;
  const auto body = nlohmann::json::parse(r.body, nullptr, false);
  if (body.is_object()) {
    const auto status = body.value("status", nlohmann::json::object());
    const auto user = status.value("user", nlohmann::json::object());
    const auto audiences = status.value("audiences", nlohmann::json::array());
    const bool ours = status.value("authenticated", false) &&
                      user.value("username", "") == options_.service_account &&
                      std::find(audiences.begin(), audiences.end(), options_.audience) != audiences.end();
    const auto extra = user.value("extra", nlohmann::json::object());
    if (ours && extra.contains(kNodeNameKey) && extra[kNodeNameKey].is_array() && !extra[kNodeNameKey].empty() &&
        extra[kNodeNameKey][0].is_string())
      node = extra[kNodeNameKey][0].get<std::string>();
  }
  if (cache_.size() >= kMaxCached) cache_.clear();
  cache_[key] = Answer{node, now + options_.cache_for};
  return node;
}

}  // namespace mcp::broker
