#include "broker/store/dedup_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "common/error.h"

namespace mcp::broker {
namespace {

constexpr uint64_t kNowUs = 1'700'000'000'000'000;

// The broker's order: check, store, record.
bool accept(DedupTable& table, const std::string& agent, uint64_t seq, const std::string& cred = "",
            uint64_t incarnation = 0, uint64_t now_us = kNowUs) {
  if (table.check(agent, incarnation, cred, seq, now_us) != Admission::kNew) return false;
  table.record(agent, incarnation, cred, seq, now_us);
  return true;
}

TEST(DedupTable, AcceptsIncreasingSequencesAndRejectsReplays) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 10));
  EXPECT_TRUE(accept(table, "a", 11));
  EXPECT_EQ(table.check("a", 0, "", 11, kNowUs), Admission::kDuplicate);  // replay after a lost ack
  EXPECT_EQ(table.check("a", 0, "", 5, kNowUs), Admission::kDuplicate);
  EXPECT_TRUE(accept(table, "b", 5));  // marks are per agent
  EXPECT_EQ(table.high_water("a", 0), 11u);
}

TEST(DedupTable, AnIdIsBoundToTheCredentialThatFirstPublishedIt) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 10, "token:aaaa"));
  EXPECT_EQ(table.check("a", 0, "token:bbbb", UINT64_MAX, kNowUs), Admission::kForeignCredential);
  EXPECT_EQ(table.check("a", 0, "token:bbbb", 5, kNowUs), Admission::kForeignCredential);
  EXPECT_EQ(table.check("a", 0, "", 11, kNowUs), Admission::kForeignCredential);
  EXPECT_TRUE(accept(table, "a", 11, "token:aaaa"));
  // A mark repaired from the journal has no credential yet: the next publisher binds it.
  table.advance("c", 0, 20, kNowUs);
  EXPECT_TRUE(accept(table, "c", 21, "x509:node-c"));
  EXPECT_EQ(table.credential("c"), "x509:node-c");
}

TEST(DedupTable, AKnownAgentsSequenceMayNotJumpPastTheWindow) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "a", 1000));
  EXPECT_EQ(table.check("a", 0, "", UINT64_MAX, kNowUs), Admission::kBeyondWindow);
  EXPECT_EQ(table.check("a", 0, "", 1000 + kSequenceWindow + 1, kNowUs), Admission::kNew)
      << "still below the broker's clock in µs: an agent back after an outage";
  EXPECT_EQ(table.check("a", 0, "", kNowUs + kClockAllowanceUs, kNowUs), Admission::kNew);
  EXPECT_EQ(table.check("a", 0, "", kNowUs + kClockAllowanceUs + 1, kNowUs), Admission::kBeyondWindow);
  // Past the clock, the window is relative to the mark.
  EXPECT_TRUE(accept(table, "a", kNowUs + kClockAllowanceUs));
  EXPECT_EQ(table.check("a", 0, "", kNowUs + kClockAllowanceUs + kSequenceWindow, kNowUs), Admission::kNew);
  EXPECT_EQ(table.check("a", 0, "", kNowUs + kClockAllowanceUs + kSequenceWindow + 1, kNowUs),
            Admission::kBeyondWindow);
  // Issue 29: an unseen id took any sequence, so one forged batch at 2^64-1 silenced it forever.
  EXPECT_EQ(table.check("new", 0, "", UINT64_MAX, kNowUs), Admission::kBeyondWindow);
  EXPECT_EQ(table.check("new", 0, "", kNowUs, kNowUs), Admission::kNew);  // an older agent's first
}

// Issue 29: sequences count per incarnation (the agent's spool). A daemon restarted without its
// spool, or after its clock stepped back, counts from 1 again: under its new incarnation its
// batches are new, not "duplicates" of what the old one (or a forger) sent.
TEST(DedupTable, EachIncarnationCountsFromOneAndMayNotStartHigh) {
  DedupTable table;
  EXPECT_TRUE(accept(table, "node-7", 1, "", 0xaaaa));
  EXPECT_TRUE(accept(table, "node-7", 1000, "", 0xaaaa));
  EXPECT_TRUE(accept(table, "node-7", 1, "", 0xbbbb)) << "a new incarnation is not shadowed";
  EXPECT_EQ(table.check("node-7", 0xaaaa, "", 1000, kNowUs), Admission::kDuplicate);
  EXPECT_EQ(table.check("node-7", 0xbbbb, "", 1, kNowUs), Admission::kDuplicate);
  // A forged first sequence, or a walk past the window, is refused; within it is taken.
  EXPECT_EQ(table.check("node-7", 0xcccc, "", kSequenceWindow + 1, kNowUs), Admission::kBeyondWindow);
  EXPECT_EQ(table.check("node-7", 0xcccc, "", UINT64_MAX, kNowUs), Admission::kBeyondWindow);
  EXPECT_EQ(table.check("node-7", 0xaaaa, "", 1000 + kSequenceWindow + 1, kNowUs), Admission::kBeyondWindow)
      << "no clock allowance for an incarnation";
  EXPECT_EQ(table.check("node-7", 0xaaaa, "", 1000 + kSequenceWindow, kNowUs), Admission::kNew);
  EXPECT_EQ(table.high_water("node-7", 0xaaaa), 1000u);
  EXPECT_EQ(table.high_water("node-7", 0xbbbb), 1u);
}

TEST(DedupTable, KeepsTheMostRecentlyUsedIncarnationsOfAnAgent) {
  DedupTable table;
  for (uint64_t inc = 1; inc <= kMaxIncarnations + 4; ++inc)  // a spool lost every 10 minutes
    ASSERT_TRUE(accept(table, "a", 5, "", inc, kNowUs + inc * kIncarnationIdleUs));
  EXPECT_EQ(table.high_water("a", 1), 0u) << "the least recently used went";
  EXPECT_EQ(table.high_water("a", kMaxIncarnations + 4), 5u);
  EXPECT_EQ(table.high_water("a", 5), 5u);
}

// Issue 51, finding 5: 20 incarnations sent under the victim's id pushed its mark out, so its
// replay of 5 acked batches was stored twice. Another credential creates none; one shared with
// the victim (no authentication) only fills the free slots, and the victim's mark stays until
// it has been unused for kIncarnationIdleUs.
TEST(DedupTable, IncarnationsSentUnderAnotherAgentsIdDoNotEvictItsMark) {
  for (const std::string attacker : {"token:attacker", ""}) {
    SCOPED_TRACE("attacker credential '" + attacker + "'");
    const std::string victim = attacker.empty() ? "" : "token:victim";
    DedupTable table;
    for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE(accept(table, "node-v", seq, victim, 0x7777));
    int created = 0;
    for (uint64_t inc = 1; inc <= 20; ++inc) {
      const Admission a = table.check("node-v", inc, attacker, 1, kNowUs + 1000000);
      if (a == Admission::kNew) {
        table.record("node-v", inc, attacker, 1, kNowUs + 1000000);
        ++created;
      } else {
        EXPECT_EQ(a, attacker.empty() ? Admission::kIncarnationsInUse : Admission::kForeignCredential);
      }
    }
    EXPECT_EQ(created, attacker.empty() ? static_cast<int>(kMaxIncarnations) - 1 : 0);
    for (uint64_t seq = 1; seq <= 5; ++seq)
      EXPECT_EQ(table.check("node-v", 0x7777, victim, seq, kNowUs + 2000000), Admission::kDuplicate)
          << "the victim's replay of batch " << seq << " would be stored twice";
    if (attacker.empty()) {  // unused for 10 minutes, the least recently used mark may go
      EXPECT_EQ(table.check("node-v", 21, "", 1, kNowUs + kIncarnationIdleUs), Admission::kNew);
      EXPECT_EQ(table.check("node-v", 21, "", 1, kNowUs + kIncarnationIdleUs - 1), Admission::kIncarnationsInUse);
    }
  }
}

TEST(DedupTable, MarksAndBindingsSurviveARestart) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-" + std::to_string(std::random_device{}()) + ".json");
  {
    DedupTable table(file, kNowUs);
    accept(table, "agent-1", 42, "token:aaaa");
    accept(table, "agent-1", 9, "token:aaaa", 7);
    table.persist();
  }
  DedupTable reloaded(file, kNowUs);
  EXPECT_EQ(reloaded.check("agent-1", 0, "token:aaaa", 42, kNowUs), Admission::kDuplicate);
  EXPECT_EQ(reloaded.check("agent-1", 7, "token:aaaa", 9, kNowUs), Admission::kDuplicate);
  EXPECT_EQ(reloaded.check("agent-1", 0, "token:bbbb", 43, kNowUs), Admission::kForeignCredential);
  EXPECT_TRUE(accept(reloaded, "agent-1", 43, "token:aaaa"));
  std::filesystem::remove(file);
}

// Issue 29: each new id rewrote the whole file under the broker's lock (16 s per 1000 new ids
// at 10,000). A binding is now one appended line, read back after the snapshot.
TEST(DedupTable, BindingsMadeSinceTheSnapshotSurviveAKillWithoutRewritingIt) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-bind-" + std::to_string(std::random_device{}()) + ".json");
  {
    DedupTable table(file, kNowUs);
    accept(table, "early", 1, "token:aaaa");
    table.persist();
    for (int i = 0; i < 2000; ++i) accept(table, "node-" + std::to_string(i), 1, "token:" + std::to_string(i));
    // killed here: no persist()
  }
  EXPECT_LT(std::filesystem::file_size(file), 200u) << "the snapshot was rewritten per binding";
  DedupTable reloaded(file, kNowUs);
  EXPECT_EQ(reloaded.credential("early"), "token:aaaa");
  EXPECT_EQ(reloaded.credential("node-1999"), "token:1999");
  EXPECT_EQ(reloaded.check("node-5", 0, "token:6", kNowUs, kNowUs), Admission::kForeignCredential);
  reloaded.persist();
  EXPECT_FALSE(std::filesystem::exists(file.string() + ".bindings"));
  EXPECT_EQ(DedupTable(file, kNowUs).credential("node-1999"), "token:1999");
  std::filesystem::remove(file);
}

// Issue 29: ids never expired. One unseen for longer than the period goes (marks and binding);
// one recorded within it stays, and the time it was seen survives a restart.
TEST(DedupTable, AnIdUnseenForThePeriodIsForgottenAndTheLastSeenTimeSurvivesARestart) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-expire-" + std::to_string(std::random_device{}()) + ".json");
  constexpr uint64_t kDayUs = uint64_t{86400} * 1000000;
  {
    DedupTable table(file, kNowUs);
    table.record("gone", 0, "token:g", 5, kNowUs);
    table.record("kept", 0, "token:k", 5, kNowUs);
    table.record("kept", 0, "token:k", 6, kNowUs + 20 * kDayUs);
    EXPECT_EQ(table.expire(kNowUs + 31 * kDayUs, std::chrono::hours(24 * 30)), 1u);
    EXPECT_EQ(table.expire(kNowUs + 31 * kDayUs, std::chrono::seconds(0)), 0u) << "0 keeps everything";
    EXPECT_EQ(table.agents(), 1u);
    EXPECT_EQ(table.credential("gone"), "");
    EXPECT_EQ(table.check("gone", 0, "token:other", 1, kNowUs), Admission::kNew);
    table.persist();
  }
  DedupTable reloaded(file, kNowUs);
  EXPECT_EQ(reloaded.credential("kept"), "token:k");
  EXPECT_EQ(reloaded.expire(kNowUs + 49 * kDayUs, std::chrono::hours(24 * 30)), 0u);
  EXPECT_EQ(reloaded.expire(kNowUs + 51 * kDayUs, std::chrono::hours(24 * 30)), 1u) << "seen was not kept";
  std::filesystem::remove(file);
}

TEST(DedupTable, LoadsTheOlderFormatAsUnboundMarks) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-old-" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(file) << R"({"agent-1": 42})";
  DedupTable table(file, kNowUs);
  EXPECT_EQ(table.high_water("agent-1", 0), 42u);
  EXPECT_TRUE(accept(table, "agent-1", 43, "token:aaaa"));
  std::filesystem::remove(file);
}

// The load time is the caller's clock (BrokerOptions::clock), not the host's: an id from a file
// without "seen" counts as seen then, and expires a whole period after it.
TEST(DedupTable, AnIdLoadedWithoutASeenTimeCountsFromTheLoadTimeGiven) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcp-dedup-loaded-" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(file) << R"({"agent-1": {"sequence": 42, "credential": "token:aaaa"}})";
  constexpr uint64_t kLoadUs = kNowUs + uint64_t{5} * 1000000;
  DedupTable table(file, kLoadUs);
  EXPECT_EQ(table.expire(kLoadUs + uint64_t{60} * 1000000, std::chrono::seconds(60)), 0u);
  EXPECT_EQ(table.expire(kLoadUs + uint64_t{61} * 1000000, std::chrono::seconds(60)), 1u);
  std::filesystem::remove(file);
}

// Issue 51, finding 2 (the broker's state): the snapshot went through a fixed FILE.tmp and the
// bindings were appended by name, so links planted there had the broker (root) overwrite or
// append to whatever they pointed at. Now neither is written through a link.
TEST(DedupTable, LinksPlantedBesideTheStateAreNeverWrittenThrough) {
  const auto dir = std::filesystem::temp_directory_path() / ("mcp-dedup-links-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directory(dir);
  const auto file = dir / "marks.json";
  const auto victim = dir / "victim";
  std::ofstream(victim) << "victim\n";
  std::filesystem::create_symlink(victim, file.string() + ".tmp");
  std::filesystem::create_symlink(victim, file.string() + ".bindings");
  const auto victim_text = [&] {
    std::ifstream in(victim);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    DedupTable table(file, kNowUs);
    EXPECT_THROW(accept(table, "node-a", 1, "token:a"), Error) << "a binding was appended through the link";
    table.persist();
  }
  EXPECT_EQ(victim_text(), "victim\n");
  EXPECT_TRUE(std::filesystem::is_symlink(file.string() + ".tmp"));
  EXPECT_FALSE(std::filesystem::is_symlink(file));
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mcp::broker
