#include "broker/store/nats_naming.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/error.h"

namespace mcp::broker {
namespace {

std::string hex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// hex()'s inverse (lowercase only); nullopt for anything hex() cannot have made.
std::optional<std::string> unhex(std::string_view s) {
  if (s.size() % 2) return std::nullopt;
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  std::string out;
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = digit(s[i]), lo = digit(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string subject_token(std::string_view service) {
  if (service.empty()) return "_";
  std::string out(service);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

std::string subject_for(std::string_view service) {
  return std::string(kSubjectPrefix) + "." + subject_token(service);
}

std::string subject_filter(std::string_view service) {
  return service.empty() ? std::string(kSubjectPrefix) + ".>" : subject_for(service);
}

std::string message_id(std::string_view agent_id, uint64_t incarnation, uint64_t sequence,
                       uint32_t part) {
  const bool plain = agent_id.find('|') == std::string_view::npos &&
                     agent_id.find('%') == std::string_view::npos;
  std::string id = (plain ? std::string(agent_id) : "%" + hex(agent_id)) + "|";
  if (incarnation != 0) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx:", static_cast<unsigned long long>(incarnation));
    id += buf;
  }
  return id + std::to_string(sequence) + "|" + std::to_string(part);
}

std::string policy_key(const PolicyKey& key) {
  // An empty field still needs a non-empty token: "_" cannot be a hex digit pair.
  const std::string s = key.service.empty() ? "_" : hex(key.service);
  const std::string p = key.probe.empty() ? "_" : hex(key.probe);
  return "p." + s + "." + p + (key.trace_id_prefix.empty() ? "" : "." + hex(key.trace_id_prefix));
}

std::optional<PolicyKey> parse_policy_key(std::string_view key) {
  if (key.substr(0, 2) != "p.") return std::nullopt;
  key.remove_prefix(2);
  const auto field = [](std::string_view token) -> std::optional<std::string> {
    if (token == "_") return std::string();
    if (token.empty()) return std::nullopt;
    return unhex(token);
  };
  std::optional<std::string> tokens[3];
  int n = 0;
  while (n < 3) {
    const auto dot = key.find('.');
    tokens[n++] = field(key.substr(0, dot));
    if (dot == std::string_view::npos) break;
    key.remove_prefix(dot + 1);
    if (n == 3) return std::nullopt;  // a fourth token
  }
  if (n < 2 || !tokens[0] || !tokens[1]) return std::nullopt;
  if (n == 3 && (!tokens[2] || tokens[2]->empty())) return std::nullopt;
  return PolicyKey{std::move(*tokens[0]), std::move(*tokens[1]), n == 3 ? std::move(*tokens[2]) : std::string()};
}

std::vector<std::string> parse_nats_urls(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    std::string url(item);
    const auto scheme = url.find("://");
    if (scheme == std::string::npos) {
      url = "nats://" + url;
    } else if (url.compare(0, scheme, "nats") != 0) {
      throw usage_error("--backend: '" + std::string(item) + "' is not a nats:// address");
    }
    const auto colon = url.rfind(':');
    if (colon <= url.find("://") || colon + 1 >= url.size() ||
        url.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      throw usage_error("--backend: '" + std::string(item) + "' needs HOST:PORT");
    out.push_back(std::move(url));
  }
  if (out.empty()) throw usage_error("--backend needs nats://HOST:PORT[,HOST:PORT...]");
  return out;
}

NatsSource parse_nats_source(std::string_view text) {
  const size_t eq = text.find('=');
  NatsSource source;
  source.domain = std::string(text.substr(0, eq));
  if (eq != std::string_view::npos) {
    source.service = std::string(text.substr(eq + 1));
    if (source.service.empty())
      throw usage_error("--nats-source '" + std::string(text) + "': no service after '=' (leave out '=' for every service)");
  }
  const bool token = !source.domain.empty() && std::all_of(source.domain.begin(), source.domain.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (!token)
    throw usage_error("--nats-source '" + std::string(text) +
                      "': want DOMAIN[=SERVICE], DOMAIN a JetStream domain of letters, digits, '_' and '-'");
  return source;
}

}  // namespace mcp::broker
