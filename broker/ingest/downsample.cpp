#include "broker/ingest/downsample.h"

#include <cmath>

#include "common/event.h"
#include "common/mix64.h"

namespace mcp::broker {
namespace {
constexpr uint64_t kLow56 = (uint64_t{1} << 56) - 1;
}

uint64_t mix64(uint64_t x) { return mcp::mix64(x + 0x9e3779b97f4a7c15ull); }

BatchEventIds::BatchEventIds(const std::string& agent_id, uint64_t sequence, uint64_t incarnation)
    : sequence_(sequence) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the agent id
  for (unsigned char c : agent_id) h = (h ^ c) * 0x100000001b3ull;
  agent_hash_ = incarnation == 0 ? h : h ^ mix64(incarnation);
}

uint64_t BatchEventIds::operator()(uint32_t index) const {
  return mix64(agent_hash_ ^ mix64(sequence_ * 0x9e3779b97f4a7c15ull + index));
}

SubscriptionFilter SubscriptionFilter::from(const mcp::v1::SubscriptionRequest& req) {
  SubscriptionFilter f;
  f.service = req.service_name();
  for (const auto& [k, v] : req.tags()) f.tags[k] = v;
  f.rate = (req.sampling_rate() <= 0 || req.sampling_rate() >= 1) ? 1.0 : req.sampling_rate();
  return f;
}

bool keep_at_rate(uint64_t id, double rate) {
  if (rate >= 1.0) return true;
  const auto limit = static_cast<uint64_t>(std::ldexp(rate, 56));
  return (mix64(id) & kLow56) < limit;
}

double realised_rate(double rate) {
  if (rate >= 1.0) return 1.0;
  return std::ldexp(static_cast<double>(static_cast<uint64_t>(std::ldexp(rate, 56))), -56);
}

uint64_t rescale_threshold(uint64_t threshold, double p_rate) {
  const uint64_t t = threshold == 0 ? UINT64_MAX : threshold;
  return mcp::probability_to_threshold(mcp::threshold_to_probability(t) * p_rate);
}

bool matches(const mcp::v1::Sample& s, const SubscriptionFilter& f) {
  if (!f.service.empty() && s.service() != f.service) return false;
  for (const auto& [k, v] : f.tags) {
    const auto it = s.tags().find(k);
    if (it == s.tags().end() || it->second != v) return false;
  }
  return true;
}

bool filter_packet(const mcp::v1::SamplePacket& in, const SubscriptionFilter& f,
                   mcp::v1::SamplePacket* out) {
  out->Clear();
  out->set_agent_id(in.agent_id());
  out->set_sequence(in.sequence());
  out->set_offset(in.offset());
  out->set_broker_hlc(in.broker_hlc());
  const double p_rate = realised_rate(f.rate);
  for (const auto& s : in.samples()) {
    if (!matches(s, f)) continue;
    if (!keep_at_rate(s.trace_id() != 0 ? s.trace_id() : s.event_id(), f.rate)) continue;
    auto* kept = out->add_samples();
    *kept = s;
    if (p_rate < 1.0) {
      kept->set_threshold(rescale_threshold(s.threshold(), p_rate));
      kept->clear_th();  // the broker's draw is not OTel's: the agent's th no longer describes it
    }
  }
  return out->samples_size() > 0;
}

}  // namespace mcp::broker
