// NatsBackendOptions: where the JetStream backend lives and the limits of what it keeps
// (jetstream_client.h). The defaults are the documented ones of mcp-broker --help: 24 h, 1 GiB,
// 3 replicas, a 2 minute duplicate window.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mcp::broker {

// Events another cluster's brokers stored, copied into this cluster's stream by JetStream (a
// stream source over a leaf node, from the JetStream domain `domain`, the same stream name):
// this cluster's subscribers then get them too, each once, also after the link was down.
struct NatsSource {
  std::string domain;
  std::string service;  // empty: every service
};

struct NatsBackendOptions {
  std::vector<std::string> servers;            // nats://HOST:PORT, first preferred
  std::string stream = "MCP_SAMPLES";
  std::chrono::nanoseconds max_age = std::chrono::hours(24);  // 0: unlimited
  int64_t max_bytes = 1ll << 30;               // -1: unlimited
  int replicas = 3;                            // 1..5; a single nats-server needs 1
  std::chrono::nanoseconds duplicate_window = std::chrono::minutes(2);
  std::string policy_bucket = "mcp_policies";
  // Agent id -> the credential that first published it (as the embedded backend's agents.json),
  // shared by every broker; an entry unrefreshed for agent_expiry goes (0: never).
  std::string agent_bucket = "mcp_agents";
  std::chrono::seconds agent_expiry{30 * 24 * 3600};
  std::chrono::milliseconds publish_timeout{10000};  // per batch, retries included
  // Pipeline an agent's batches (js_PublishMsgAsync; acks go back in order as JetStream confirms)
  // instead of one synchronous js_PublishMsg round trip per batch.
  bool async_publish = true;
  std::chrono::milliseconds setup_timeout{20000};    // connect + stream/bucket creation
  std::vector<NatsSource> sources;  // --nats-source: at most one per domain
};

}  // namespace mcp::broker
