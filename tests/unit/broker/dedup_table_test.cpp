#include "broker/dedup_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

namespace mcp::broker {
namespace {

constexpr uint64_t kNowUs = 1'700'000'000'000'000;

// The broker's order: check, store, record.
bool accept(DedupTable& table, const std::string& agent, uint64_t seq, const std::string& cred = "") {
  if (table.check(agent, cred, seq, kNowUs) != Admission::kNew) return false;
  table.record(agent, cred, seq);
  return true;
}

TEST(DedupTable, AcceptsIncreasingSequencesAndRejectsReplays) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 10));
  EXPECT_TRUE(accept(table, "a", 11));
  EXPECT_EQ(table.check("a", "", 11, kNowUs), Admission::kDuplicate);  // replay after a lost ack
  EXPECT_EQ(table.check("a", "", 5, kNowUs), Admission::kDuplicate);
  EXPECT_TRUE(accept(table, "b", 5));  // marks are per agent
  EXPECT_EQ(table.high_water("a"), 11u);
}

TEST(DedupTable, AnIdIsBoundToTheCredentialThatFirstPublishedIt) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 10, "token:aaaa"));
  EXPECT_EQ(table.check("a", "token:bbbb", UINT64_MAX, kNowUs), Admission::kForeignCredential);
  EXPECT_EQ(table.check("a", "token:bbbb", 5, kNowUs), Admission::kForeignCredential);
  EXPECT_EQ(table.check("a", "", 11, kNowUs), Admission::kForeignCredential);
  EXPECT_TRUE(accept(table, "a", 11, "token:aaaa"));
  // A mark repaired from the journal has no credential yet: the next publisher binds it.
  table.advance("c", 20);
  EXPECT_TRUE(accept(table, "c", 21, "x509:node-c"));
  EXPECT_EQ(table.credential("c"), "x509:node-c");
}

TEST(DedupTable, AKnownAgentsSequenceMayNotJumpPastTheWindow) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 1000));
  EXPECT_EQ(table.check("a", "", UINT64_MAX, kNowUs), Admission::kBeyondWindow);
  EXPECT_EQ(table.check("a", "", 1000 + kSequenceWindow + 1, kNowUs), Admission::kNew)
      << "still below the broker's clock in µs: an agent back after an outage";
  EXPECT_EQ(table.check("a", "", kNowUs + kClockAllowanceUs, kNowUs), Admission::kNew);
  EXPECT_EQ(table.check("a", "", kNowUs + kClockAllowanceUs + 1, kNowUs), Admission::kBeyondWindow);
  // Past the clock, the window is relative to the mark.
  EXPECT_TRUE(accept(table, "a", kNowUs + kClockAllowanceUs));
  EXPECT_EQ(table.check("a", "", kNowUs + kClockAllowanceUs + kSequenceWindow, kNowUs), Admission::kNew);
  EXPECT_EQ(table.check("a", "", kNowUs + kClockAllowanceUs + kSequenceWindow + 1, kNowUs),
            Admission::kBeyondWindow);
  EXPECT_EQ(table.check("new", "", UINT64_MAX, kNowUs), Admission::kNew);  // unknown: any
}

TEST(DedupTable, MarksAndBindingsSurviveARestart) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-" + std::to_string(std::random_device{}()) + ".json");
  {
    DedupTable table(file);
    accept(table, "agent-1", 42, "token:aaaa");
    table.persist();
  }
  DedupTable reloaded(file);
  EXPECT_EQ(reloaded.check("agent-1", "token:aaaa", 42, kNowUs), Admission::kDuplicate);
  EXPECT_EQ(reloaded.check("agent-1", "token:bbbb", 43, kNowUs), Admission::kForeignCredential);
  EXPECT_TRUE(accept(reloaded, "agent-1", 43, "token:aaaa"));
  std::filesystem::remove(file);
}

TEST(DedupTable, LoadsTheOlderFormatAsUnboundMarks) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-old-" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(file) << R"({"agent-1": 42})";
  DedupTable table(file);
  EXPECT_EQ(table.high_water("agent-1"), 42u);
  EXPECT_TRUE(accept(table, "agent-1", 43, "token:aaaa"));
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace mcp::broker
