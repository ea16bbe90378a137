// The ready file (runtime/readiness.h) on real files. Issue 51: root replaced a root-only
// file through a link planted at READY.tmp, the fixed name the line was written to first
// (fs.protected_symlinks may be 0). `victim` stands for such a file outside the directory.
#include "runtime/readiness.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "../../support/files.h"

namespace mcp::runtime {
namespace {

namespace fs = std::filesystem;

class ReadyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    victim_ = outside_.write("victim", "root only\n");
    ASSERT_EQ(chmod(victim_.c_str(), 0600), 0);
  }
  std::string victim() const { return test::slurp(victim_); }

  test::TempDir dir_{"mcp-ready"};
  test::TempDir outside_{"mcp-ready-victim"};
  fs::path victim_;
};

TEST_F(ReadyFile, IsWrittenWithTheReadyLine) {
  const auto ready = dir_ / "ready";
  announce_ready(3, ready.string());
  EXPECT_EQ(test::slurp(ready), "mcp-agent: ready: 3 probes attached\n");
  struct stat st {};
  ASSERT_EQ(stat(ready.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "supervisors read it";
  for (const auto& e : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().filename(), "ready") << "no temporary left behind";
}

TEST_F(ReadyFile, ALinkPlantedAtTheTemporaryNameIsNeverWrittenThrough) {
  const auto ready = dir_ / "ready";
  fs::create_symlink(victim_, ready.string() + ".tmp");
  announce_ready(2, ready.string());
  EXPECT_EQ(victim(), "root only\n");
  EXPECT_EQ(test::slurp(ready), "mcp-agent: ready: 2 probes attached\n");
  EXPECT_FALSE(fs::is_symlink(ready));
}

TEST_F(ReadyFile, ALinkAtTheNameItselfIsReplacedNotFollowed) {
  const auto ready = dir_ / "ready";
  fs::create_symlink(victim_, ready);
  announce_ready(1, ready.string());
  EXPECT_EQ(victim(), "root only\n");
  EXPECT_FALSE(fs::is_symlink(ready));
  EXPECT_EQ(test::slurp(ready), "mcp-agent: ready: 1 probes attached\n");
}

TEST_F(ReadyFile, ADirectoryOthersCanPlantLinksInIsRefusedNamingItAndWhy) {
  ASSERT_EQ(chmod(dir_.path().c_str(), 0777), 0);
  const auto ready = dir_ / "ready";
  try {
    announce_ready(1, ready.string());
    ADD_FAILURE() << "a world-writable directory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()), "ready file: refusing directory " + dir_.path().string() +
                                         ": it is writable by group or others without the sticky bit (mode 0777), "
                                         "so another user can plant links where we write (chmod go-w)");
  }
  EXPECT_FALSE(fs::exists(ready));
  // /tmp's shape (sticky, root's) is fine: the temporary's name cannot be planted in advance.
  ASSERT_EQ(chmod(dir_.path().c_str(), 01777), 0);
  announce_ready(1, ready.string());
  EXPECT_TRUE(fs::exists(ready));
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(chown(dir_.path().c_str(), 65534, 65534), 0);
  EXPECT_THROW(
      {
        try {
          announce_ready(1, ready.string());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("it is owned by uid 65534"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace mcp::runtime
