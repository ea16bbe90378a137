#include "fuzz_targets.h"

#include <cstring>
#include <string_view>

#include "broker/store/dedup_table.h"
#include "broker/ingest/event_block.h"
#include "broker/ingest/publish_check.h"
#include "config/parse_config.h"
#include "spool/segment_log.h"
#include "mcp/v1/sampling.pb.h"
#include "rules/ruleset.h"

namespace mcp::fuzz {

namespace {
Event fixed_event() {
  Event e;
  e.probe = "/usr/bin/app:handle";
  e.pid = 42;
  e.nargs = 3;
  e.args = {1, 2, 3, 0, 0, 0};
  e.has_ret = true;
  e.ret = -1;
  std::memcpy(e.comm.data(), "app", 3);
  e.service = "checkout";
  e.tags = {{"version", "v1"}};
  e.attributes = {{"field.category", "biometric"}, {"amount", "12.5"}, {"consent.granted", "true"}};
  return e;
}
}  // namespace

int rules_one_input(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto rs = rules::RuleSet::compile(text);
    Event e = fixed_event();
    rules::Decision d;
    rs.evaluate(e, d);
    rules::apply(rs, e, d);
    (void)rules::audit_record(rs, d, e);
  } catch (const rules::RulesError&) {
  }
  return 0;
}

int config_one_input(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cfg = config::parse_config(text, "fuzz.yaml");
    for (const auto& s : cfg.services) (void)cfg.version_targets(s.service);
  } catch (const config::ConfigError&) {
  }
  return 0;
}

namespace {
const mcp::broker::PublishLimits kFuzzLimits{.max_batch_samples = 64, .max_message_bytes = 64 << 10};
}  // namespace

bool publish_input_valid(const uint8_t* data, size_t size) {
  using namespace mcp::broker;
  const std::string_view wire(reinterpret_cast<const char*>(data), size);
  mcp::v1::AgentMessage msg;
  mcp::v1::EventBlock block;
  return scan_agent_message(wire, kFuzzLimits).ok() && msg.ParseFromArray(data, static_cast<int>(size)) &&
         (!msg.has_hello() || (check_agent_id(msg.hello().agent_id()).ok() && check_hello(msg.hello()).ok())) &&
         (!msg.has_batch() || check_batch(msg.batch(), kFuzzLimits).ok()) &&
         (!msg.has_batch() || msg.batch().events().empty() ||
          parse_event_block(msg.batch().events(), kFuzzLimits, &block).ok());
}

int publish_one_input(const uint8_t* data, size_t size) {
  using namespace mcp::broker;
  const PublishLimits& limits = kFuzzLimits;
  static DedupTable dedup;  // state carries over between inputs, as in a running broker
  static SegmentLog journal(SegmentLogOptions{{}, 64 << 10, 256 << 10});
  const std::string_view wire(reinterpret_cast<const char*>(data), size);
  if (!scan_agent_message(wire, limits).ok()) return 0;
  mcp::v1::AgentMessage msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (msg.has_batch() && msg.batch().samples_size() > static_cast<int>(limits.max_batch_samples))
    __builtin_trap();  // the scan let through more samples than the bound
  if (msg.has_hello()) (void)check_agent_id(msg.hello().agent_id());
  if (msg.has_hello()) (void)check_hello(msg.hello());
  if (!msg.has_batch() || !check_batch(msg.batch(), limits).ok()) return 0;
  // A compact batch: bounded before parsing, then every index checked, so the conversions and
  // filters below never read out of range (ASan traps if they do).
  mcp::v1::EventBlock block;
  if (!msg.batch().events().empty()) {
    if (!parse_event_block(msg.batch().events(), limits, &block).ok()) return 0;
    if (block.events_size() > static_cast<int>(limits.max_batch_samples))
      __builtin_trap();  // the scan let through more events than the bound
    // The broker stores these bytes with its event ids added (no re-encode): every accepted
    // block must take them and still parse as the block with the ids set.
    std::vector<uint64_t> ids(static_cast<size_t>(block.events_size()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 2 ? 0 : i + 1;
    std::string with_ids;
    mcp::v1::EventBlock reparsed;
    if (!with_event_ids(msg.batch().events(), ids, &with_ids) ||
        !reparsed.ParseFromString(with_ids) || reparsed.events_size() != block.events_size())
      __builtin_trap();
    for (int i = 0; i < block.events_size(); ++i)
      if (reparsed.events(i).event_id() != (ids[i] ? ids[i] : block.events(i).event_id())) __builtin_trap();
    google::protobuf::RepeatedPtrField<mcp::v1::Sample> samples;
    block_to_samples(block, "fuzz-agent", &samples);
    mcp::v1::EventBlock again;
    samples_to_block(samples, &again);
    if (!check_event_block(again).ok() || again.events_size() != block.events_size())
      __builtin_trap();  // a checked block does not survive its own conversion
    SubscriptionFilter filter;
    filter.service = size % 3 ? "checkout" : "";
    if (size % 5) filter.tags = {{"zone", "a"}};
    filter.rate = size % 7 ? 0.5 : 1.0;
    mcp::v1::EventBlock subset;
    (void)filter_block(block, filter, &subset);
  }
  // Two credentials, picked by the input, so bindings are exercised too.
  const std::string credential = size % 2 ? "token:a" : "token:b";
  const uint64_t now_us = 1'700'000'000'000'000;
  const uint64_t incarnation = size % 3;  // 0: an older agent's clock-based count
  if (dedup.check("fuzz-agent", incarnation, credential, msg.batch().sequence(), now_us) != Admission::kNew)
    return 0;
  mcp::v1::SamplePacket packet;
  packet.set_agent_id("fuzz-agent");
  packet.set_sequence(msg.batch().sequence());
  *packet.mutable_samples() = msg.batch().samples();
  if (!msg.batch().events().empty()) block.SerializeToString(packet.mutable_events());
  const std::string payload = packet.SerializeAsString();
  const uint64_t offset = journal.append(payload, static_cast<uint32_t>(packet.samples_size() + block.events_size()));
  dedup.record("fuzz-agent", incarnation, credential, msg.batch().sequence(), now_us);
  const auto back = journal.read_from(offset, 1);
  mcp::v1::SamplePacket read;
  if (back.empty() || back[0].offset != offset || !read.ParseFromString(back[0].payload) ||
      read.SerializeAsString() != payload)
    __builtin_trap();  // what was stored does not read back
  return 0;
}

}  // namespace mcp::fuzz
