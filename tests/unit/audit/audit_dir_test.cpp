// Issue 51: the audit trail's directory on real files. Root created a trail file where a link
// planted by another user pointed (fs.protected_symlinks may be 0). `victim` stands for a
// root-only file outside the trail; every test checks it is left as it was.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "audit/audit_log.h"
#include "common/error.h"
#include "../../support/files.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

class AuditDir : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directory(trail_);
    ASSERT_EQ(chmod(trail_.c_str(), 0700), 0);
    victim_ = outside_.write("victim", "root only");  // no newline: a torn line to cut
    ASSERT_EQ(chmod(victim_.c_str(), 0600), 0);
  }
  AuditOptions options() const {
    AuditOptions o;
    o.dir = trail_;
    return o;
  }
  // Opening the trail must throw an error that contains `needle`.
  void expect_refused(const std::string& needle) {
    try {
      AuditLog log(options());
      ADD_FAILURE() << "the trail opened; expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
  }

  test::TempDir root_{"mcp-audit-dir"};
  test::TempDir outside_{"mcp-audit-victim"};
  fs::path trail_ = root_ / "trail";
  fs::path victim_;
};

TEST_F(AuditDir, ADirectoryOthersCanPlantLinksInIsRefusedBeforeAnythingIsWritten) {
  ASSERT_EQ(chmod(trail_.c_str(), 0777), 0);
  expect_refused("audit log: refusing directory " + trail_.string() +
                 ": it is writable by group or others without the sticky bit (mode 0777), so another user can "
                 "plant links where we write (chmod go-w)");
  EXPECT_TRUE(fs::is_empty(trail_));
  EXPECT_FALSE(fs::exists(default_key_file(trail_)));
  struct stat st {};
  ASSERT_EQ(stat(trail_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u) << "not tightened into looking safe";
  if (geteuid() == 0) {
    ASSERT_EQ(chmod(trail_.c_str(), 0700), 0);
    ASSERT_EQ(chown(trail_.c_str(), 65534, 65534), 0);
    expect_refused("audit log: refusing directory " + trail_.string() + ": it is owned by uid 65534");
    ASSERT_EQ(chown(trail_.c_str(), 0, 0), 0);
  }
  // The normal path: a directory of root's that only root writes.
  ASSERT_EQ(chmod(trail_.c_str(), 0755), 0);
  {
    AuditLog log(options());
    EXPECT_TRUE(fs::is_regular_file(log.current_file()));
  }
  ASSERT_EQ(stat(trail_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "tightened once found safe";
}

TEST_F(AuditDir, ALinkWhereTheNextTrailFileGoesIsRefusedNotCreatedThrough) {
  const fs::path target = outside_ / "created";
  fs::create_symlink(target, trail_ / "audit-000000000001.jsonl");
  expect_refused((trail_ / "audit-000000000001.jsonl").string() + ": a symbolic link is there");
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(AuditDir, ALinkAtTheNewestTrailFileIsRefusedNotCutThrough) {
  fs::create_symlink(victim_, trail_ / "audit-000000000001.jsonl");
  expect_refused((trail_ / "audit-000000000001.jsonl").string() + ": a symbolic link is there");
  EXPECT_EQ(test::slurp(victim_), "root only");
}

}  // namespace
}  // namespace mcp::audit
