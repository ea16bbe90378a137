// PolicyFanout: the agents connected to this broker, as policy pushes see them. A Publish stream
// joins once its agent is admitted and leaves when it ends; push() sends a message to every one
// joined (each stream queues it; none blocks the caller). Each agent's latest policy_status is
// kept while it is connected, for refusals(). After close() (the broker stopping) nothing joins.
// Thread-safe; no lock is held while a peer's send() runs.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "broker/policy/policy_key.h"
#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

class PolicyPeer {
 public:
  virtual ~PolicyPeer() = default;
  // Queues a message for the agent; false once its stream is over.
  virtual bool send(const mcp::v1::BrokerMessage& msg) = 0;
};

class PolicyFanout {
 public:
  bool join(std::shared_ptr<PolicyPeer> peer);  // false once closed
  void leave(const PolicyPeer* peer);           // forgets its refusals too
  void close();
  uint32_t push(const mcp::v1::BrokerMessage& msg);  // how many peers took it
  size_t agents() const;

  void set_refusals(const PolicyPeer* peer, const std::string& agent_id, const mcp::v1::PolicyStatus& status);
  // Every connected agent's refusals, by policy key: "AGENT: PROBE[, PROBE] (REASON)", sorted.
  std::map<PolicyKey, std::vector<std::string>> refusals() const;

 private:
  struct AgentRefusals {
    std::string agent_id;
    mcp::v1::PolicyStatus status;
  };
  mutable std::mutex mu_;  // guards everything below
  bool closed_ = false;
  std::set<std::shared_ptr<PolicyPeer>> peers_;
  std::map<const PolicyPeer*, AgentRefusals> refusals_;
};

}  // namespace mcp::broker
