// Names the JetStream backend derives from our data: subjects, message ids, key-value keys and
// the server list of --backend. Pure functions, no NATS types, so they are unit-tested alone.
//
// Subjects: a service becomes one subject token: bytes outside [A-Za-z0-9_-] become '_' (NATS
// tokens may not hold '.', '*', '>' or whitespace), the empty service becomes "_". Distinct
// services may share a token ("a.b" and "a_b"); the subject is only a coarse server-side filter
// and the broker still matches the exact service on every sample.
// Message ids: "<agent>|[<incarnation %016x>:]<sequence>|<part>" (the agent id hex-escaped where it could hold '|'),
// stable across replays of the same spooled batch, so JetStream's duplicate window drops them.
// Policy keys: "p." + hex(service) + "." + hex(probe), because probes hold ':' and '/', which KV
// keys do not allow; hex keeps the key reversible and collision-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/store/nats_options.h"
#include "broker/policy/policy_key.h"

namespace mcp::broker {

inline constexpr std::string_view kSubjectPrefix = "mcp.samples";

std::string subject_token(std::string_view service);
std::string subject_for(std::string_view service);     // "mcp.samples.<token>"
std::string subject_filter(std::string_view service);  // empty: "mcp.samples.>"
// A batch part's Nats-Msg-Id. The agent's incarnation (Hello.incarnation) is in it when set: a
// new incarnation counts its sequences from 1 again, inside JetStream's duplicate window.
std::string message_id(std::string_view agent_id, uint64_t incarnation, uint64_t sequence, uint32_t part);
// "p.<service>.<probe>[.<trace_id_prefix>]" (hex tokens, "_" for an empty field): the keys of
// policies without a prefix are those brokers before prefix rules wrote.
std::string policy_key(const PolicyKey& key);
// policy_key's inverse, or nullopt for a key policy_key cannot have made.
std::optional<PolicyKey> parse_policy_key(std::string_view key);

// "nats://a:1,b:2,nats://c:3" -> {"nats://a:1", "nats://b:2", "nats://c:3"}; throws mcp::Error
// (usage) when empty or when an entry has no port or another scheme.
std::vector<std::string> parse_nats_urls(std::string_view text);

// --nats-source "DOMAIN[=SERVICE]": a JetStream domain (letters, digits, '_', '-') and the one
// service to copy from it (none: every service); throws mcp::Error (usage) otherwise.
NatsSource parse_nats_source(std::string_view text);

}  // namespace mcp::broker
