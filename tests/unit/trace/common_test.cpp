// Threshold <-> probability conversion (shared semantics with bpf/mcp_abi.h) and
// human duration parsing.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/duration.h"
#include "common/error.h"
#include "common/event.h"
#include "common/utf8.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;

TEST(Threshold, MaxThresholdMeansKeepAll) {
  EXPECT_EQ(threshold_to_probability(UINT64_MAX), 1.0);
  EXPECT_EQ(probability_to_threshold(1.0), UINT64_MAX);
  Event e;
  e.threshold = UINT64_MAX;
  EXPECT_EQ(e.weight(), 1.0);
}

TEST(Threshold, ProbabilityAboveOneIsKeepAll) {
  EXPECT_EQ(probability_to_threshold(1.5), UINT64_MAX);
  EXPECT_EQ(probability_to_threshold(std::numeric_limits<double>::infinity()), UINT64_MAX);
}

TEST(Threshold, ZeroNegativeAndNanProbabilityKeepNothing) {
  EXPECT_EQ(probability_to_threshold(0.0), 0u);
  EXPECT_EQ(probability_to_threshold(-0.25), 0u);
  EXPECT_EQ(probability_to_threshold(std::nan("")), 0u);
  EXPECT_EQ(threshold_to_probability(0), 0.0);
}

TEST(Threshold, HalfIsTwoToTheSixtyThree) {
  EXPECT_EQ(probability_to_threshold(0.5), uint64_t{1} << 63);
  EXPECT_EQ(threshold_to_probability(uint64_t{1} << 63), 0.5);
}

TEST(Threshold, RoundTripsTypicalRates) {
  for (double p : {0.9, 0.5, 0.1, 0.01, 1e-3, 1e-6, 1e-9}) {
    const uint64_t t = probability_to_threshold(p);
    // Truncating p * 2^64 to an integer costs at most one part in the threshold.
    const double tolerance = 2.0 / static_cast<double>(t) + 1e-15;
    EXPECT_NEAR(threshold_to_probability(t) / p, 1.0, tolerance) << "p=" << p;
    Event e;
    e.threshold = t;
    EXPECT_NEAR(e.weight() * p, 1.0, tolerance) << "p=" << p;
  }
}

TEST(Threshold, JustBelowOneIsNotKeepAll) {
  // The largest double below 1 must still sample (UINT64_MAX is reserved for "all").
  const uint64_t t = probability_to_threshold(std::nextafter(1.0, 0.0));
  EXPECT_LT(t, UINT64_MAX);
  EXPECT_GT(t, UINT64_MAX - (uint64_t{1} << 12));
}

TEST(Threshold, IsMonotonicInProbability) {
  uint64_t prev = 0;
  for (int i = 1; i <= 1000; i++) {
    const uint64_t t = probability_to_threshold(i / 1000.0);
    EXPECT_GE(t, prev) << i;
    prev = t;
  }
}

TEST(EventKindName, NamesMatchTheJsonVocabulary) {
  EXPECT_EQ(to_string(EventKind::kUprobe), "uprobe");
  EXPECT_EQ(to_string(EventKind::kUretprobe), "uretprobe");
  EXPECT_EQ(to_string(EventKind::kSyscall), "syscall");
}

TEST(EventComm, ViewStopsAtNulOrSixteenBytes) {
  Event e;
  std::copy_n("bash", 5, e.comm.begin());
  EXPECT_EQ(e.comm_view(), "bash");
  e.comm.fill('x');  // no NUL at all: never read past the array
  EXPECT_EQ(e.comm_view().size(), 16u);
}

TEST(ParseDuration, AcceptsEveryUnit) {
  EXPECT_EQ(parse_duration("10s"), 10s);
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("2m"), 2min);
  EXPECT_EQ(parse_duration("1h"), 1h);
  EXPECT_EQ(parse_duration("500us"), 500us);
  EXPECT_EQ(parse_duration("100ns"), 100ns);
}

TEST(ParseDuration, BareNumberIsSecondsAndFractionsWork) {
  EXPECT_EQ(parse_duration("5"), 5s);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("0.25ms"), 250us);
}

TEST(ParseDuration, RejectsBadTextAsUsageErrorNamingIt) {
  for (const char* bad : {"", "abc", "s", "10x", "10 s", "-1s", "10sec"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(ParseDuration, RejectsNonFiniteAndOverflowingValues) {
  // from_chars accepts "inf"/"nan" and huge exponents; converting those to int64
  // nanoseconds is undefined behaviour, so they must be rejected as usage errors.
  for (const char* bad : {"inf", "nan", "1e30s", "1e12h"}) {
    bool threw = false;
    try {
      parse_duration(bad);
    } catch (const Error& e) {
      threw = e.code() == ExitCode::kUsage;
    }
    EXPECT_TRUE(threw) << "parse_duration('" << bad << "') must be a usage error";
  }
}

// The one UTF-8 check behind the JSON encoder and the protobuf conversion: it must accept
// exactly what protobuf's parser accepts (RFC 3629), or a batch becomes unreadable.
TEST(Utf8, AcceptsEveryWellFormedSequenceLength) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(is_valid_utf8("\xed\x9f\xbf"));       // U+D7FF, just below the surrogates
  EXPECT_TRUE(is_valid_utf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the last code point
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));
}

TEST(Utf8, RejectsWhatProtobufRejects) {
  for (const char* bad : {"\xff\xfe", "\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                          "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff\x80\x80", "\xe2\x82",
                          "\xd0"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << ::testing::PrintToString(std::string(bad));
  }
}

TEST(Utf8, RepairReplacesEachInvalidByteAndKeepsTheRest) {
  EXPECT_EQ(valid_utf8("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(valid_utf8("ok\xffok"), "ok\xef\xbf\xbdok");
  EXPECT_EQ(valid_utf8("\xc3\xa9\xc3"), "\xc3\xa9\xef\xbf\xbd");  // a cut last character
  EXPECT_EQ(valid_utf8("caf\xc3\xa9"), "caf\xc3\xa9");
  for (const char* bad : {"\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    EXPECT_TRUE(is_valid_utf8(valid_utf8(bad)));
}

}  // namespace
}  // namespace mcp
