// The prefix rules' spelling and match (lib/common/trace_id_prefix.h): the userspace side of
// the kernel's LPM trie, used for the summary's per-rule counts and by every front end.
#include "common/trace_id_prefix.h"

#include <gtest/gtest.h>

namespace mcp {
namespace {

TEST(TraceIdPrefix, ParsesOneToThirtyTwoHexDigitsOfEitherCaseLowercased) {
  const auto p = parse_trace_id_prefix("00AfC");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->digits, "00afc");
  EXPECT_EQ(p->bits(), 20u);
  EXPECT_EQ(p->bytes[0], 0x00);
  EXPECT_EQ(p->bytes[1], 0xaf);
  EXPECT_EQ(p->bytes[2], 0xc0);
  EXPECT_TRUE(parse_trace_id_prefix(std::string(32, 'f')).has_value());
  for (const char* bad : {"", "0x1", "g", "00 af"}) {
    EXPECT_FALSE(parse_trace_id_prefix(bad).has_value()) << bad;
    EXPECT_FALSE(trace_id_prefix_error(bad).empty()) << bad;
  }
  EXPECT_FALSE(parse_trace_id_prefix(std::string(33, '0')).has_value());
}

TEST(TraceIdPrefix, MatchesTheIdsWhoseLeadingDigitsItSpellsInEitherHalf) {
  const auto a = *parse_trace_id_prefix("a");
  EXPECT_TRUE(a.matches(0xa000000000000000ull, 0));
  EXPECT_TRUE(a.matches(0xafffffffffffffffull, ~0ull));
  EXPECT_FALSE(a.matches(0xb000000000000000ull, 0));
  const auto full_hi = *parse_trace_id_prefix("0123456789abcdef");
  EXPECT_TRUE(full_hi.matches(0x0123456789abcdefull, 42));
  EXPECT_FALSE(full_hi.matches(0x0123456789abcdeeull, 42));
  // Past the first half: the low word's leading digits count too.
  const auto long_prefix = *parse_trace_id_prefix("0123456789abcdef7");
  EXPECT_TRUE(long_prefix.matches(0x0123456789abcdefull, 0x7000000000000001ull));
  EXPECT_FALSE(long_prefix.matches(0x0123456789abcdefull, 0x8000000000000001ull));
  const auto whole = *parse_trace_id_prefix("0123456789abcdef0011223344556677");
  EXPECT_TRUE(whole.matches(0x0123456789abcdefull, 0x0011223344556677ull));
  EXPECT_FALSE(whole.matches(0x0123456789abcdefull, 0x0011223344556676ull));
}

TEST(TraceIdPrefix, HexDigitValueReadsBothCasesAndNothingElse) {
  EXPECT_EQ(hex_digit_value('0'), 0);
  EXPECT_EQ(hex_digit_value('F'), 15);
  EXPECT_EQ(hex_digit_value('f'), 15);
  EXPECT_EQ(hex_digit_value('g'), -1);
  EXPECT_EQ(hex_digit_value(0xff), -1);
}

}  // namespace
}  // namespace mcp
