#include "control/trace_id_arg.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>

#include "common/error.h"
#include "common/event.h"
#include "common/setting_names.h"

namespace mcp::control {
namespace {

TEST(TraceIdArg, ParsesIndexAndFormat) {
  EXPECT_EQ(parse_trace_id_arg("3:u64"), (TraceIdArg{3, TraceIdFormat::kU64}));
  EXPECT_EQ(parse_trace_id_arg("2:hex32"), (TraceIdArg{2, TraceIdFormat::kHex32}));
  EXPECT_EQ(parse_trace_id_arg("5:bytes16"), (TraceIdArg{5, TraceIdFormat::kBytes16}));
}

TEST(TraceIdArg, BadValuesAreUsageErrors) {
  for (const char* bad : {"", "0", "6", "-1", "x", "1:", "1:hex", "1:HEX32", ":hex32", "1:bytes16:x",
                          "01x", " 1"}) {
    try {
      parse_trace_id_arg(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const mcp::Error& e) {
      EXPECT_EQ(e.code(), mcp::ExitCode::kUsage) << bad;
      // The setting, as the running front end spells it (plain words here: no front end).
      EXPECT_NE(std::string(e.what()).find(mcp::setting_name(mcp::Setting::kTraceIdArg) + " '"), std::string::npos)
          << e.what();
    }
  }
}

// The CLI once read a bare "1" as a pointer to hex and the config as the integer itself:
// the bare spelling now names the three meanings instead of picking one.
TEST(TraceIdArg, BareIndexIsRejectedNamingEachExplicitForm) {
  TraceIdArg out;
  const std::string why = trace_id_arg_error("1", out);
  for (const char* form : {"1:hex32", "1:bytes16", "1:u64"}) EXPECT_NE(why.find(form), std::string::npos) << why;
}

// Vectors for the BPF side: W3C example trace id, randomness = last 7 bytes big-endian.
TEST(TraceRandomness, W3cExampleHexAndBytesAgree) {
  const std::string hex = "4bf92f3577b34da6a3ce929d0e0e4736";
  EXPECT_EQ(trace_randomness56_hex(hex), 0xce929d0e0e4736ULL);
  const std::array<uint8_t, 16> raw = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                       0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  EXPECT_EQ(trace_randomness56(raw, TraceIdFormat::kBytes16), 0xce929d0e0e4736ULL);
  EXPECT_EQ(trace_randomness56_hex("4BF92F3577B34DA6A3CE929D0E0E4736"), 0xce929d0e0e4736ULL);
  EXPECT_EQ(trace_randomness56_hex("00000000000000000000000000000000"), 0u);
  EXPECT_EQ(trace_randomness56_hex("ffffffffffffffffffffffffffffffff"), kRandomness56Mask);
}

TEST(TraceRandomness, InvalidOrShortInputHasNoRandomness) {
  EXPECT_FALSE(trace_randomness56_hex("4bf92f3577b34da6a3ce929d0e0e473g").has_value());
  EXPECT_FALSE(trace_randomness56_hex("4bf92f3577b34da6a3ce929d0e0e473").has_value());
  // The whole id is read and recorded: a bad character before the randomness is no id either.
  EXPECT_FALSE(trace_randomness56_hex("zzzzzzzzzzzzzzzzzz00000000000001").has_value());
  const std::array<uint8_t, 15> short_raw{};
  EXPECT_FALSE(trace_randomness56(short_raw, TraceIdFormat::kBytes16).has_value());
}

TEST(ConsistentKeep, KeepsRandomnessAtOrAboveTheOtelRejectionThreshold) {
  // p = 0.5: A = 2^63, T = 2^56 - 2^55 = 2^55; OTel keeps r >= T (the upper half).
  const uint64_t half = probability_to_threshold(0.5);
  EXPECT_EQ(half, uint64_t{1} << 63);
  EXPECT_FALSE(consistent_keep((uint64_t{1} << 55) - 1, half));
  EXPECT_TRUE(consistent_keep(uint64_t{1} << 55, half));
  EXPECT_TRUE(consistent_keep(0xce929d0e0e4736ULL, UINT64_MAX));  // keep all keeps everything
  EXPECT_TRUE(consistent_keep(0, UINT64_MAX));
  EXPECT_FALSE(consistent_keep(kRandomness56Mask, 0));             // keep none keeps nothing
  // W3C example: r / 2^56 = 0.8069..., so T = (1 - p) 2^56 <= r iff p >= 0.1931.
  EXPECT_TRUE(consistent_keep(0xce929d0e0e4736ULL, probability_to_threshold(0.20)));
  EXPECT_FALSE(consistent_keep(0xce929d0e0e4736ULL, probability_to_threshold(0.19)));
}

TEST(OtelTh, SpellsTheRejectionThresholdAsOpenTelemetryDoes) {
  EXPECT_EQ(mcp::otel_th(UINT64_MAX), "0");  // p = 1
  EXPECT_EQ(mcp::otel_th(probability_to_threshold(0.5)), "8");
  EXPECT_EQ(mcp::otel_th(probability_to_threshold(0.25)), "c");
  EXPECT_EQ(mcp::otel_th(probability_to_threshold(0.01)), "fd70a3d70a3d71");
  // Against 128-bit arithmetic: T = 2^56 - floor(A / 256), 14 digits, zeros trimmed.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; i++) {
    const uint64_t a = rng() | 1;
    const unsigned __int128 t = (static_cast<unsigned __int128>(1) << 56) - (a >> 8);
    char buf[32];
    snprintf(buf, sizeof(buf), "%014llx", static_cast<unsigned long long>(t));
    std::string want(buf);
    while (want.size() > 1 && want.back() == '0') want.pop_back();
    EXPECT_EQ(mcp::otel_th(a), want) << a;
  }
}

// The property the feature exists for: a lower rate keeps a subset of a higher rate, the kept
// fraction is p, and a chain of hops at one rate keeps p end to end rather than p^3.
TEST(ConsistentKeep, KeepsFractionPAndNestsAcrossRatesAndHops) {
  std::mt19937_64 rng(7);
  constexpr int kIds = 200'000;
  const uint64_t t10 = probability_to_threshold(0.10);
  const uint64_t t01 = probability_to_threshold(0.01);
  int kept10 = 0, kept01 = 0, chain = 0;
  for (int i = 0; i < kIds; ++i) {
    const uint64_t r = rng() & kRandomness56Mask;
    const bool k10 = consistent_keep(r, t10);
    const bool k01 = consistent_keep(r, t01);
    if (k01) EXPECT_TRUE(k10);
    kept10 += k10;
    kept01 += k01;
    chain += consistent_keep(r, t10) && consistent_keep(r, t10) && consistent_keep(r, t10);
  }
  EXPECT_NEAR(kept10, kIds * 0.10, kIds * 0.10 * 0.03);
  EXPECT_NEAR(kept01, kIds * 0.01, kIds * 0.01 * 0.10);
  EXPECT_EQ(chain, kept10);
}

}  // namespace
}  // namespace mcp::control
