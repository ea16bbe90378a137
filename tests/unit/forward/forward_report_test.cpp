// What a run leaves undelivered (Undelivered) and agent ids (agent_id.h), on real files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "forward/agent_id.h"
#include "forward/forwarder.h"

namespace mcp {
namespace {

TEST(Undelivered, NothingToSayWhenEverythingWasAcknowledged) {
  ForwarderStats s;
  s.acked = 100;
  EXPECT_FALSE(undelivered_of(s).any());
  EXPECT_EQ(undelivered_of(s).describe(), "");
}

TEST(Undelivered, PendingEventsAreLostWithoutASpoolDirectory) {
  ForwarderStats s;
  s.queued = 3;
  s.unacked = 120;
  const auto u = undelivered_of(s);
  EXPECT_EQ(u.pending, 123u);
  EXPECT_EQ(u.describe(), "123 events undelivered: 123 lost with the in-memory spool (no spool directory)");
}

TEST(Undelivered, PendingEventsOnDiskSayWhere) {
  ForwarderStats s;
  s.unacked = 50;
  s.dropped_oldest = 7;
  s.unreadable_events = 3;
  s.spool_dir = "/var/lib/mcp-agent/spool";
  const auto u = undelivered_of(s);
  EXPECT_EQ(u.lost, 10u);
  EXPECT_EQ(u.describe(),
            "60 events undelivered: 50 kept in the spool /var/lib/mcp-agent/spool (a later run with it sends them), "
            "10 lost during the run (full queue or spool, or unreadable batches)");
}

TEST(AgentId, EveryRunGetsItsOwnId) {
  std::set<std::string> ids;
  for (int i = 0; i < 100; i++) ids.insert(unique_agent_id());
  EXPECT_EQ(ids.size(), 100u) << "two runs on one host must never share an id";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(unique_agent_id().rfind(std::string(host) + "-" + std::to_string(getpid()) + "-", 0), 0u);
}

TEST(AgentId, StableIdIsStoredOwnerOnlyAndReused) {
  const auto dir = std::filesystem::temp_directory_path() / ("mcp-agent-id-" + std::to_string(std::random_device{}()));
  const std::string first = stable_agent_id(dir);
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(stable_agent_id(dir), first) << "a restart keeps the id";
  struct stat st;
  ASSERT_EQ(stat((dir / "agent-id").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(stable_agent_id(dir.string() + "-other"), first) << "another state directory, another id";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir.string() + "-other");
}

// Issue 51: the id was written through DIR/agent-id.tmp, a fixed name a link could be planted
// at, and read through DIR/agent-id (another file's first line sent as the id).
TEST(AgentId, NeverWrittenOrReadThroughALinkNorInADirectoryOthersCanWrite) {
  const auto dir = std::filesystem::temp_directory_path() / ("mcp-agent-id-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir / "outside");
  const auto victim = dir / "outside" / "victim";
  std::ofstream(victim) << "root only\n";
  const auto state = dir / "state";
  std::filesystem::create_directory(state);
  std::filesystem::permissions(state, std::filesystem::perms::owner_all);
  std::filesystem::create_symlink(victim, state / "agent-id.tmp");
  const std::string id = stable_agent_id(state);
  EXPECT_NE(id, "root only");
  EXPECT_FALSE(std::filesystem::is_symlink(state / "agent-id"));
  EXPECT_EQ(stable_agent_id(state), id);
  std::filesystem::remove(state / "agent-id");
  std::filesystem::create_symlink(victim, state / "agent-id");
  try {
    stable_agent_id(state);
    ADD_FAILURE() << "read through a link";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find((state / "agent-id").string() + ": a symbolic link is there"),
              std::string::npos) << e.what();
  }
  std::filesystem::permissions(state, std::filesystem::perms::all);
  try {
    stable_agent_id(state);
    ADD_FAILURE() << "a world-writable directory was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("agent id: refusing directory " + state.string() + ": it is writable"),
              std::string::npos) << e.what();
  }
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "root only\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mcp
