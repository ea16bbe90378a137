#include "broker/ingest/publish_check.h"

#include <gtest/gtest.h>

namespace mcp::broker {
namespace {

mcp::v1::AgentMessage batch_of(int samples, uint64_t sequence = 7, uint64_t threshold = UINT64_MAX) {
  mcp::v1::AgentMessage m;
  m.mutable_batch()->set_sequence(sequence);
  for (int i = 0; i < samples; ++i) {
    auto* s = m.mutable_batch()->add_samples();
    s->set_service("checkout");
    s->set_threshold(threshold);
  }
  return m;
}

TEST(PublishCheck, ScanCountsSamplesBeforeParsingAndRefusesTooMany) {
  PublishLimits limits;
  limits.max_batch_samples = 100;
  EXPECT_TRUE(scan_agent_message(batch_of(100).SerializeAsString(), limits).ok());
  const Verdict v = scan_agent_message(batch_of(101).SerializeAsString(), limits);
  EXPECT_EQ(v.code, Verdict::kTooLarge);
  EXPECT_NE(v.reason.find("100"), std::string::npos) << v.reason;
  // Two batch fields on the wire are merged by the parser: the scan counts both.
  const std::string twice = batch_of(60).SerializeAsString() + batch_of(60).SerializeAsString();
  EXPECT_EQ(scan_agent_message(twice, limits).code, Verdict::kTooLarge);
}

TEST(PublishCheck, ScanRefusesOversizedAndMalformedBytes) {
  PublishLimits limits;
  limits.max_message_bytes = 64;
  EXPECT_EQ(scan_agent_message(std::string(65, '\0'), limits).code, Verdict::kTooLarge);
  limits.max_message_bytes = 1 << 20;
  std::string wire = batch_of(3).SerializeAsString();
  wire.resize(wire.size() - 3);
  EXPECT_EQ(scan_agent_message(wire, limits).code, Verdict::kInvalid);
  EXPECT_EQ(scan_agent_message("\xff\xff\xff", limits).code, Verdict::kInvalid);
  EXPECT_TRUE(scan_agent_message("", limits).ok());  // an empty message parses (and is refused later)
}

TEST(PublishCheck, BatchNeedsASequenceAndNonZeroThresholds) {
  const PublishLimits limits;
  EXPECT_TRUE(check_batch(batch_of(3).batch(), limits).ok());
  EXPECT_EQ(check_batch(batch_of(3, 0).batch(), limits).code, Verdict::kInvalid);
  const Verdict v = check_batch(batch_of(3, 7, 0).batch(), limits);
  EXPECT_EQ(v.code, Verdict::kInvalid);
  EXPECT_NE(v.reason.find("threshold"), std::string::npos);
}

TEST(PublishCheck, AgentIdIsPrintableAsciiWithoutSeparators) {
  EXPECT_TRUE(check_agent_id("node-1.example:abc@x/y").ok());
  for (const std::string bad : {std::string(), std::string("a b"), std::string("a|b"),
                                std::string("\xff"), std::string(257, 'a'), std::string("a\nb")})
    EXPECT_EQ(check_agent_id(bad).code, Verdict::kInvalid) << bad;
}

}  // namespace
}  // namespace mcp::broker
