// Where and how the Kubernetes API is reached: the in-cluster convention (the API server at
// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the pod's service account token
// and CA bundle under /var/run/secrets/kubernetes.io/serviceaccount), each part overridable
// (configuration, tests). Resolving checks that the files are readable now; the token file
// is read again by the client whenever it changes (the kubelet rotates projected tokens).
#pragma once
#include <optional>
#include <string>

namespace mcp::kube {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ApiConfig {
  std::string server;      // https://host:port (no trailing slash)
  std::string token_file;  // bearer token file
  std::string ca_file;     // PEM bundle that signs the API server's certificate
  bool operator==(const ApiConfig&) const = default;
};

// The in-cluster configuration with the non-empty fields of `overrides` taking precedence,
// or nullopt with `why` set to one line saying what is missing (no KUBERNETES_SERVICE_HOST,
// an unreadable token or CA file).
std::optional<ApiConfig> resolve_api_config(const ApiConfig& overrides, std::string& why);

}  // namespace mcp::kube
