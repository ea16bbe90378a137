// The JSON encoder's bytes are a contract (consumers parse them, `subscribe` must print what
// `trace` prints): tests/fixtures/json_golden.jsonl holds the lines the encoder printed for
// tests/support/golden_events.h when it was recorded, and every later encoder must print
// exactly those bytes. To re-record after an intended change of the format:
//   MCP_RECORD_GOLDEN=1 build/tests/trace_unit_tests --gtest_filter='JsonGolden.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "golden_events.h"
#include "output/formatter.h"

namespace mcp::output {
namespace {

const std::string kGolden = std::string(MCP_SOURCE_DIR) + "/tests/fixtures/json_golden.jsonl";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JsonGolden, EncoderPrintsTheRecordedBytes) {
  const auto golden = test::golden_events();
  auto json = make_formatter("json");
  std::string out;
  for (const auto& e : golden.events) json->format(e, out);
  if (std::getenv("MCP_RECORD_GOLDEN")) {
    std::ofstream(kGolden, std::ios::binary) << out;
    GTEST_SKIP() << "recorded " << kGolden;
  }
  const std::string want = read_all(kGolden);
  ASSERT_FALSE(want.empty()) << "missing " << kGolden;
  if (out == want) return;
  // Name the first line that differs rather than dumping both files.
  std::istringstream got_lines(out), want_lines(want);
  std::string g, w;
  for (size_t line = 1;; ++line) {
    const bool more_g = static_cast<bool>(std::getline(got_lines, g));
    const bool more_w = static_cast<bool>(std::getline(want_lines, w));
    if (!more_g && !more_w) break;
    ASSERT_EQ(g, w) << "line " << line << " of " << kGolden;
  }
  FAIL() << "same lines, different bytes";
}

// The recorded lines are themselves valid JSON, one object per event (a broken fixture would
// otherwise pin broken output).
TEST(JsonGolden, RecordedLinesAreJsonObjects) {
  const std::string want = read_all(kGolden);
  std::istringstream lines(want);
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n)
    EXPECT_TRUE(nlohmann::json::parse(line).is_object()) << line;
  EXPECT_EQ(n, test::golden_events().events.size());
}

TEST(JsonGolden, AppendsAfterWhatTheBufferHolds) {
  const auto golden = test::golden_events();
  auto json = make_formatter("json");
  std::string alone, after = "prefix\n";
  json->format(golden.events[4], alone);
  json->format(golden.events[4], after);
  EXPECT_EQ(after, "prefix\n" + alone);
}

}  // namespace
}  // namespace mcp::output
