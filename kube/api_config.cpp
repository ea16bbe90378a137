#include "kube/api_config.h"

#include <cstdlib>
#include <fstream>

namespace mcp::kube {
namespace {

std::string env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

bool readable(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

std::optional<ApiConfig> resolve_api_config(const ApiConfig& overrides, std::string& why) {
  ApiConfig c = overrides;
  if (c.server.empty()) {
    const std::string host = env("KUBERNETES_SERVICE_HOST");
    if (host.empty()) {
      why = "not in a cluster (KUBERNETES_SERVICE_HOST is unset) and no API server configured";
      return std::nullopt;
    }
    std::string port = env("KUBERNETES_SERVICE_PORT");
    if (port.empty()) port = "443";
    // An IPv6 service address needs brackets in a URL.
    c.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  }
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.token_file.empty()) c.token_file = std::string(kServiceAccountDir) + "/token";
  if (c.ca_file.empty()) c.ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  if (!readable(c.token_file)) {
    why = "no service account token at " + c.token_file;
    return std::nullopt;
  }
  if (!readable(c.ca_file)) {
    why = "no API server CA bundle at " + c.ca_file;
    return std::nullopt;
  }
  return c;
}

}  // namespace mcp::kube
