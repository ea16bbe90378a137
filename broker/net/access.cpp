#include "broker/net/access.h"

#include <openssl/sha.h>

#include <sstream>

#include "common/error.h"

namespace mcp::broker {
namespace {

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Constant time in the length of the stored token, so a wrong guess leaks no prefix length.
bool same(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

std::vector<TokenGrant> parse_token_grants(std::string_view text, const std::string& file,
                                           uint8_t only) {
  std::vector<TokenGrant> out;
  size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const auto space = line.find_first_of(" \t");
    TokenGrant g;
    if (space == std::string_view::npos) {
      g.token = std::string(line);
      if (only) g.roles = only;
    } else if (only) {
      throw usage_error(file + ":" + std::to_string(line_no) + ": expected one token per line");
    } else {
      g.token = std::string(trim(line.substr(space)));
      g.roles = 0;
      std::string_view roles = line.substr(0, space);
      while (!roles.empty()) {
        const auto comma = roles.find(',');
        const std::string_view r = roles.substr(0, comma);
        roles = comma == std::string_view::npos ? std::string_view() : roles.substr(comma + 1);
        if (r == "publish") g.roles |= kPublish;
        else if (r == "subscribe") g.roles |= kSubscribe;
        else if (r == "policy") g.roles |= kPolicy;
        else if (r == "all") g.roles |= kAllRoles;
        else
          throw usage_error(file + ":" + std::to_string(line_no) + ": unknown role '" + std::string(r) +
                            "' (publish, subscribe, policy, all)");
      }
      if (g.token.find_first_of(" \t") != std::string::npos)
        throw usage_error(file + ":" + std::to_string(line_no) + ": expected 'ROLE[,ROLE] TOKEN'");
    }
    out.push_back(std::move(g));
  }
  if (out.empty()) throw usage_error("token file '" + file + "' holds no token");
  return out;
}

std::string role_names(uint8_t roles) {
  std::string out;
  for (auto [bit, name] : {std::pair{kPublish, "publish"}, {kSubscribe, "subscribe"}, {kPolicy, "policy"}})
    if (roles & bit) out += out.empty() ? name : std::string(",") + name;
  return out;
}

uint8_t roles_for_header(const std::vector<TokenGrant>& grants, std::string_view header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (!header.starts_with(kBearer)) return 0;
  header.remove_prefix(kBearer.size());
  uint8_t roles = 0;
  for (const auto& g : grants)
    if (same(g.token, header)) roles |= g.roles;
  return roles;
}

std::string token_identity(std::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  std::ostringstream out;
  out << "token:" << std::hex;
  for (int i = 0; i < 8; ++i) out << (digest[i] >> 4) << (digest[i] & 0xf);
  return out.str();
}

bool is_loopback_listen(const std::string& listen) {
  if (listen.starts_with("unix:")) return true;
  const auto colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

namespace {
constexpr std::string_view kNodeIdentityPrefix = "node:";
}  // namespace

grpc::Status Access::check(const grpc::ServerContextBase& ctx, uint8_t role, std::string* identity) const {
  using grpc::Status;
  using grpc::StatusCode;
  std::string_view header;
  const auto& md = ctx.client_metadata();
  if (const auto it = md.find("authorization"); it != md.end())
    header = std::string_view(it->second.data(), it->second.size());
  const std::string_view bearer =
      header.starts_with("Bearer ") ? header.substr(std::string_view("Bearer ").size()) : std::string_view();
  if (!tokens_.empty() || review_) {
    uint8_t roles = tokens_.empty() ? 0 : roles_for_header(tokens_, header);
    std::optional<std::string> node;
    if (roles == 0 && review_ && (node = review_(bearer))) roles = kPublish;
    if (roles == 0) return Status(StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
    if (role != 0 && (roles & role) == 0)
      return Status(StatusCode::PERMISSION_DENIED,
                    "this token has the roles '" + role_names(roles) + "', not '" + role_names(role) + "'");
    if (node && identity != nullptr) {
      *identity = std::string(kNodeIdentityPrefix) + *node;
      return Status::OK;
    }
  }
  if (identity == nullptr) return Status::OK;
  const auto auth = ctx.auth_context();
  if (auth && auth->IsPeerAuthenticated()) {
    *identity = "x509:";
    for (const auto& id : auth->GetPeerIdentity()) *identity += std::string(id.data(), id.size());
  } else if (!tokens_.empty()) {
    *identity = token_identity(bearer);
  }
  return Status::OK;
}

grpc::Status Access::check_publisher(const std::string& identity, const std::string& agent_id) {
  if (!identity.starts_with(kNodeIdentityPrefix)) return grpc::Status::OK;
  const std::string node = identity.substr(kNodeIdentityPrefix.size());
  if (agent_id == node) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "the credential of node '" + node + "' may publish only as agent id '" + node + "'");
}

}  // namespace mcp::broker
