// BrokerOptions: everything a Broker is started with (broker.h); the flags of mcp-broker
// (main.cpp) and the parts' settings in one struct, so the store and the endpoint read what they
// need without depending on the broker itself.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/ingest/publish_check.h"
#include "broker/net/access.h"
#include "broker/store/nats_options.h"
#include "clock/clock_source.h"
#include "otlp/exporter_options.h"

namespace mcp::broker {

struct BrokerOptions {
  std::string listen = "127.0.0.1:9090";  // port 0 picks a free port, see Broker::port()
  // With a unix:PATH listen the socket is made 0660 and this group's, so only root and its
  // members can connect (the packaged broker: mcp-sampling); empty: 0600, its owner and root.
  std::string socket_group;
  std::string tls_ca;                     // with tls_cert/tls_key: require client certificates
  std::string tls_cert;
  std::string tls_key;
  std::vector<TokenGrant> tokens;         // empty: no token authentication
  // Asked about a bearer token that no grant in `tokens` holds: the node name of an agent's
  // own credential (token_review.h), which may then publish as that agent id only, or nullopt.
  // Unset: such a token is refused.
  std::function<std::optional<std::string>(std::string_view token)> review_token;
  bool insecure = false;                  // allow a non-loopback listen without authentication
  PublishLimits limits;
  std::filesystem::path state_dir;        // empty: nothing survives a restart
  size_t subscriber_queue = 1024;         // packets per subscriber before its oldest are dropped
                                          // (a subscriber may ask for fewer)
  // The longest a batched subscription may ask its packets to wait for a shared write
  // (SubscriptionRequest.linger_ms).
  std::chrono::milliseconds subscriber_linger_max{100};
  uint64_t journal_max_bytes = 256ull << 20;
  // An agent id unseen this long is forgotten (its dedup marks and credential binding); 0: never.
  std::chrono::seconds agent_expiry{30 * 24 * 3600};
  NatsBackendOptions nats;                // servers empty: the embedded backend
  otlp::ExporterOptions otlp;             // endpoint empty: no OTLP export
  // A connection must finish its handshake (TLS, HTTP/2 settings) within this, and one with no
  // call open for connection_idle is closed (0: never): idle connections once held descriptors
  // until the broker had none left (issue 51). TCP connections are accepted by listener.h.
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds connection_idle{5 * 60 * 1000};
  // Distinct (service, probe) pairs counted in Stats and /metrics; past it new pairs are counted
  // together as ("_other", "_other") and in StatsReply.probe_series_overflow.
  size_t max_probe_series = 10000;
  // What the broker reads time from: agent expiry and dedup marks (realtime), policy stamps
  // (realtime), subscriber linger (monotonic). Injectable so tests drive expiry and linger
  // by advancing a clock::SimulatedClockSource instead of sleeping.
  std::shared_ptr<clock::ClockSource> clock;  // null: the system's (clock_source.h)
};

}  // namespace mcp::broker
