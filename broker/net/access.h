// Access: who may call what on the broker. Three rights (roles): publish (Publish), subscribe
// (Subscribe) and policy (ApplyPolicy); Stats and ListPolicies need any valid credential.
//
// Tokens come from --token-file FILE, one grant per line:  "ROLE[,ROLE...] TOKEN"  with ROLE in
// publish | subscribe | policy | all; a line with only a TOKEN grants every role (so the old
// single-token file keeps working). Blank lines and lines starting with '#' are skipped.
// --publish-token-file / --subscribe-token-file / --policy-token-file: every line one TOKEN with
// that one role (a Kubernetes Secret key mounted as a file).
// With client certificates (mTLS) and no tokens, every verified certificate has every role;
// with both, the token decides the roles and the certificate must still verify.
// identity(): what a Publish binds its agent id to (dedup_table.h): "x509:<peer identity>" when
// the client presented a certificate, else "token:<first 16 hex of SHA-256(token)>", else "".
// An agent's own ServiceAccount token (review_token, token_review.h) has the publish role only
// and the identity "node:<node name>": it may publish as that agent id alone (check_publisher).
// Access::check is all of authentication for every RPC: the broker asks nothing else.
#pragma once
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mcp::broker {

enum Role : uint8_t { kPublish = 1, kSubscribe = 2, kPolicy = 4, kAllRoles = 7 };

struct TokenGrant {
  std::string token;
  uint8_t roles = kAllRoles;
};

// Throws mcp::Error (usage) naming FILE:LINE on an unknown role or an empty file. With
// `only` set (the --publish-token-file style files), every line is a bare TOKEN with those roles.
std::vector<TokenGrant> parse_token_grants(std::string_view text, const std::string& file,
                                           uint8_t only = 0);
std::string role_names(uint8_t roles);  // "publish,subscribe"

// Roles of the bearer token in an "authorization" header value; 0 when none matches.
uint8_t roles_for_header(const std::vector<TokenGrant>& grants, std::string_view header);

std::string token_identity(std::string_view token);

// True for a listen address only this host can reach: 127.0.0.0/8, [::1], localhost, unix:.
bool is_loopback_listen(const std::string& listen);

class Access {
 public:
  // Asked about a bearer token no grant holds: the node it belongs to, or nullopt.
  using ReviewToken = std::function<std::optional<std::string>(std::string_view token)>;

  Access(std::vector<TokenGrant> tokens, ReviewToken review) : tokens_(std::move(tokens)), review_(std::move(review)) {}

  // `role` 0: any valid credential. UNAUTHENTICATED without one, PERMISSION_DENIED without the
  // role. *identity (when asked for): what a Publish binds its agent id to.
  grpc::Status check(const grpc::ServerContextBase& ctx, uint8_t role, std::string* identity = nullptr) const;
  // PERMISSION_DENIED when a node's own credential names another agent id.
  static grpc::Status check_publisher(const std::string& identity, const std::string& agent_id);

 private:
  std::vector<TokenGrant> tokens_;  // empty: no token authentication
  ReviewToken review_;              // unset: a token no grant holds is refused
};

}  // namespace mcp::broker
