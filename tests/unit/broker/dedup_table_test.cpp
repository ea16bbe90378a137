#include "broker/dedup_table.h"

#include <gtest/gtest.h>

#include <random>

namespace mcp::broker {
namespace {

TEST(DedupTable, AcceptsIncreasingSequencesAndRejectsReplays) {
  DedupTable table;
  EXPECT_TRUE(table.accept("a", 10));
  EXPECT_TRUE(table.accept("a", 11));
  EXPECT_FALSE(table.accept("a", 11));  // replay after a lost ack
  EXPECT_FALSE(table.accept("a", 5));
  EXPECT_TRUE(table.accept("b", 5));    // marks are per agent
  EXPECT_EQ(table.high_water("a"), 11u);
}

TEST(DedupTable, MarksSurviveARestart) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-" + std::to_string(std::random_device{}()) + ".json");
  {
    DedupTable table(file);
    table.accept("agent-1", 42);
    table.persist();
  }
  DedupTable reloaded(file);
  EXPECT_FALSE(reloaded.accept("agent-1", 42));
  EXPECT_TRUE(reloaded.accept("agent-1", 43));
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace mcp::broker
