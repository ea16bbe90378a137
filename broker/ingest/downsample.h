// Subscription filtering and consistent downsampling.
//
// A subscriber's sampling_rate r keeps a sample when the lower 56 bits of hash(id) are below
// r * 2^56, where id is the sample's trace id (or its event id when no trace id is known), so
// every subscriber and every hop using the same r keeps the same traces. The kept sample's
// threshold is rescaled to the product of both probabilities (the kernel's and r), so its weight
// (adjusted count) stays exact: the sum of weights estimates the original event count.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

uint64_t mix64(uint64_t x);  // one splitmix64 step: the golden-ratio increment, then common/mix64.h
// The broker's id for event `index` of an agent's batch `sequence` (when the agent set none):
// stable across replays and brokers. The agent id is hashed once per batch, not per event; a
// non-zero incarnation (Hello.incarnation) is mixed in, since each counts sequences from 1.
class BatchEventIds {
 public:
  BatchEventIds(const std::string& agent_id, uint64_t sequence, uint64_t incarnation = 0);
  uint64_t operator()(uint32_t index) const;

 private:
  uint64_t agent_hash_;
  uint64_t sequence_;
};

struct SubscriptionFilter {
  std::string service;                       // empty: all
  std::map<std::string, std::string> tags;   // all must match
  double rate = 1.0;                         // (0, 1]

  static SubscriptionFilter from(const mcp::v1::SubscriptionRequest& req);
  bool passes_everything() const { return service.empty() && tags.empty() && rate >= 1.0; }
};

bool keep_at_rate(uint64_t id, double rate);
// The probability keep_at_rate applies for `rate` (its 56-bit limit / 2^56), and a threshold
// rescaled by it, so a kept sample's weight uses exactly what was applied.
double realised_rate(double rate);
uint64_t rescale_threshold(uint64_t threshold, double p_rate);
bool matches(const mcp::v1::Sample& sample, const SubscriptionFilter& filter);

// Copies the samples of `in` that pass; the rate rescales each kept sample's threshold.
// Returns false when nothing passed (no packet to send).
bool filter_packet(const mcp::v1::SamplePacket& in, const SubscriptionFilter& filter,
                   mcp::v1::SamplePacket* out);

}  // namespace mcp::broker
