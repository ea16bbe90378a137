#include "broker/policy/policy_fanout.h"

#include <algorithm>

namespace mcp::broker {

bool PolicyFanout::join(std::shared_ptr<PolicyPeer> peer) {
  std::lock_guard lock(mu_);
  if (closed_) return false;
  peers_.insert(std::move(peer));
  return true;
}

void PolicyFanout::leave(const PolicyPeer* peer) {
  std::lock_guard lock(mu_);
  refusals_.erase(peer);
  for (auto it = peers_.begin(); it != peers_.end(); ++it)
    if (it->get() == peer) {
      peers_.erase(it);
      break;
    }
}

void PolicyFanout::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
}

uint32_t PolicyFanout::push(const mcp::v1::BrokerMessage& msg) {
  std::vector<std::shared_ptr<PolicyPeer>> peers;
  {
    std::lock_guard lock(mu_);
    peers.assign(peers_.begin(), peers_.end());
  }
  uint32_t pushed = 0;
  for (auto& p : peers) pushed += p->send(msg) ? 1 : 0;
  return pushed;
}

size_t PolicyFanout::agents() const {
  std::lock_guard lock(mu_);
  return peers_.size();
}

void PolicyFanout::set_refusals(const PolicyPeer* peer, const std::string& agent_id,
                                const mcp::v1::PolicyStatus& status) {
  std::lock_guard lock(mu_);
  auto& r = refusals_[peer];
  r.agent_id = agent_id;
  r.status = status;
}

std::map<PolicyKey, std::vector<std::string>> PolicyFanout::refusals() const {
  std::lock_guard lock(mu_);
  std::map<PolicyKey, std::vector<std::string>> out;
  for (const auto& [peer, r] : refusals_)
    for (const auto& f : r.status.refusals()) {
      std::string line = r.agent_id + ":";
      for (int i = 0; i < f.refused_by_size(); i++) line += (i ? ", " : " ") + f.refused_by(i);
      if (!f.reason().empty()) line += " (" + f.reason() + ")";
      out[{f.service(), f.probe(), f.trace_id_prefix()}].push_back(std::move(line));
    }
  for (auto& [key, lines] : out) std::sort(lines.begin(), lines.end());
  return out;
}

}  // namespace mcp::broker
