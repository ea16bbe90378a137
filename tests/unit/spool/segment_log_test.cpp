// SegmentLog (the forwarder's spool and the broker's journal) on real files in a temp dir.
#include "spool/segment_log.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

namespace mcp {
namespace {

class SegmentLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mcp-spool-" + std::to_string(std::random_device{}()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::filesystem::path> segment_files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      if (e.path().extension() == ".seg") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path dir_;
};

std::vector<std::string> payloads(const std::vector<SegmentLog::Record>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) out.push_back(r.payload);
  return out;
}

TEST_F(SegmentLogTest, ReplaysRecordsInAppendOrderAfterReopen) {
  std::vector<uint64_t> offsets;
  {
    SegmentLog log({dir_, 64, 1 << 20});
    for (int i = 0; i < 10; ++i) offsets.push_back(log.append("batch-" + std::to_string(i), 3));
  }
  EXPECT_TRUE(std::is_sorted(offsets.begin(), offsets.end()));
  SegmentLog log({dir_, 64, 1 << 20});
  const auto records = log.read_from(0, 100);
  ASSERT_EQ(records.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(records[i].payload, "batch-" + std::to_string(i));
    EXPECT_EQ(records[i].offset, offsets[i]);
    EXPECT_EQ(records[i].items, 3u);
  }
  // New appends continue above everything on disk, so sequences never repeat after a restart.
  EXPECT_GT(log.append("after"), offsets.back());
}

TEST_F(SegmentLogTest, SpoolIsReadableByItsOwnerOnly) {
  // Spooled events carry other users' arguments and command names.
  {
    SegmentLog log({dir_, 64, 1 << 20});
    log.append("secret");
  }
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const auto files = segment_files();
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A segment left 0644 by an older version is tightened when the log reopens it.
  ASSERT_EQ(chmod(files[0].c_str(), 0644), 0);
  SegmentLog reopened({dir_, 64, 1 << 20});
  ASSERT_EQ(stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(reopened.stats().items, 1u);
}

TEST_F(SegmentLogTest, RollsToANewSegmentPastSegmentBytes) {
  SegmentLog log({dir_, 100, 1 << 20});
  for (int i = 0; i < 5; ++i) log.append(std::string(80, 'x'));
  EXPECT_EQ(segment_files().size(), 5u);
  EXPECT_EQ(log.stats().segments, 5u);
}

TEST_F(SegmentLogTest, CorruptRecordIsSkippedAndCounted) {
  {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    log.append("first");
    log.append("second");
    log.append("third");
  }
  const auto file = segment_files().at(0);
  {
    // Flip one payload byte of the second record (each record: 24-byte header + payload).
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(24 + 5 + 24 + 2);
    f.put('X');
  }
  SegmentLog log({dir_, 1 << 20, 1 << 20});
  EXPECT_EQ(payloads(log.read_from(0, 10)), (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(log.stats().corrupt_records, 1u);
}

TEST_F(SegmentLogTest, TruncatedTailIsCountedAndLaterAppendsSurvive) {
  {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    log.append("complete");
    log.append("torn-by-a-crash");
  }
  const auto file = segment_files().at(0);
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 4);
  {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    EXPECT_EQ(log.stats().corrupt_records, 1u);
    log.append("after-restart");
  }
  SegmentLog log({dir_, 1 << 20, 1 << 20});
  EXPECT_EQ(payloads(log.read_from(0, 10)),
            (std::vector<std::string>{"complete", "after-restart"}));
}

TEST_F(SegmentLogTest, FullLogDropsOldestSegmentsAndCountsTheirItems) {
  SegmentLog log({dir_, 100, 300});
  for (int i = 0; i < 10; ++i) log.append(std::string(90, char('a' + i)), 7);
  const auto stats = log.stats();
  EXPECT_LE(stats.bytes, 300u);
  EXPECT_EQ(stats.dropped_records + stats.records, 10u);
  EXPECT_EQ(stats.dropped_items, stats.dropped_records * 7);
  // What is left is the newest data, still in order.
  const auto left = payloads(log.read_from(0, 100));
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(left.back(), std::string(90, 'j'));
  for (size_t i = 1; i < left.size(); ++i) EXPECT_LT(left[i - 1], left[i]);
}

TEST_F(SegmentLogTest, ReleasedRecordsAreNotReplayedAndTheirSegmentsDeleted) {
  SegmentLog log({dir_, 100, 1 << 20});
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 4; ++i) offsets.push_back(log.append(std::string(90, 'x')));
  log.release_through(offsets[1]);
  EXPECT_EQ(segment_files().size(), 2u);
  const auto left = log.read_from(0, 10);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].offset, offsets[2]);
  log.release_through(offsets[3]);
  EXPECT_EQ(log.last_offset(), 0u);
  EXPECT_EQ(log.stats().records, 0u);
}

TEST_F(SegmentLogTest, ReadFromAnOffsetSkipsEarlierRecords) {
  SegmentLog log({dir_, 50, 1 << 20});
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 6; ++i) offsets.push_back(log.append(std::to_string(i) + std::string(40, '.')));
  const auto tail = log.read_from(offsets[3], 2);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].offset, offsets[3]);
  EXPECT_EQ(tail[1].offset, offsets[4]);
}

// Issue 29: offsets came from the wall clock, so a clock stepped back (or a log emptied and
// restarted) could hand out offsets already used, and the broker acked new batches as
// duplicates.
TEST_F(SegmentLogTest, OffsetsCountFromOneAndNeverGoBackAfterTheLogEmpties) {
  uint64_t last = 0;
  uint64_t id = 0;
  {
    SegmentLog log({dir_, 100, 1 << 20});
    EXPECT_EQ(log.append("a"), 1u);
    EXPECT_EQ(log.append("b"), 2u);
    last = log.append(std::string(120, 'c'));
    id = log.id();
    EXPECT_NE(id, 0u);
    log.release_through(last);  // every segment deleted: only log.meta remembers
    EXPECT_TRUE(segment_files().empty());
  }
  SegmentLog log({dir_, 100, 1 << 20});
  EXPECT_EQ(log.id(), id);
  EXPECT_EQ(log.append("after"), last + 1);
  EXPECT_NE(SegmentLog({{}, 100, 300}).id(), SegmentLog({{}, 100, 300}).id());
}

TEST_F(SegmentLogTest, ALogAnOlderVersionWroteKeepsItsOffsetsAndHasIdZero) {
  uint64_t last = 0;
  {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    log.append("x");
    last = log.append("y");
  }
  std::filesystem::remove(dir_ / "log.meta");
  SegmentLog log({dir_, 1 << 20, 1 << 20});
  EXPECT_EQ(log.id(), 0u);
  EXPECT_EQ(log.append("z"), last + 1);
}

// Issue 29: two runs sharing a spool directory: one aborted, the other lost events.
TEST_F(SegmentLogTest, ASecondWriterOfTheDirectoryIsRefusedNamingTheHolder) {
  auto first = std::make_unique<SegmentLog>(SegmentLogOptions{dir_, 1 << 20, 1 << 20});
  first->append("mine");
  try {
    SegmentLog second({dir_, 1 << 20, 1 << 20});
    FAIL() << "a second log opened a directory in use";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("in use by another process (pid " + std::to_string(getpid()) + ")"),
              std::string::npos)
        << e.what();
  }
  first.reset();
  SegmentLog again({dir_, 1 << 20, 1 << 20});
  EXPECT_EQ(payloads(again.read_from(0, 10)), std::vector<std::string>{"mine"});
}

// Issue 29: a segment cut under a running agent aborted it (an exception from the reader).
TEST_F(SegmentLogTest, ARecordCutUnderTheLogComesBackDamagedAndLaterAppendsAreRight) {
  SegmentLog log({dir_, 1 << 20, 1 << 20});
  log.append("one");
  log.append("two");
  std::filesystem::resize_file(segment_files().at(0), 10);
  const auto damaged = log.read_from(0, 10);
  ASSERT_EQ(damaged.size(), 2u);
  EXPECT_TRUE(damaged[0].damaged && damaged[1].damaged);
  EXPECT_EQ(log.stats().corrupt_records, 2u);
  log.read_from(0, 10);
  EXPECT_EQ(log.stats().corrupt_records, 2u);  // counted once, not per read
  const uint64_t three = log.append("three");
  const auto after = log.read_from(three, 10);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_FALSE(after[0].damaged);
  EXPECT_EQ(after[0].payload, "three");
}

// Issue 29: a short write at ENOSPC left the segment's positions wrong, so after space came
// back later records "could not be read back". On a real, small tmpfs.
TEST_F(SegmentLogTest, AFullDiskLosesOnlyTheRecordsItRefusedAndPositionsStayRight) {
  std::filesystem::create_directories(dir_);
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << std::strerror(errno);
  struct Unmount {
    std::filesystem::path dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir_};
  const auto spool = dir_ / "spool";
  std::vector<std::pair<uint64_t, std::string>> stored;
  int refused = 0;
  {
    SegmentLog log({spool, 64 << 10, 1 << 20});
    for (int i = 0; i < 400 && refused < 3; ++i) {
      const std::string payload = std::to_string(i) + std::string(3000, char('a' + i % 26));
      try {
        stored.emplace_back(log.append(payload), payload);
      } catch (const std::exception& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
      }
    }
    ASSERT_GT(refused, 0) << "the tmpfs never filled";
    // Space comes back: later records are right, and so is everything stored before.
    std::filesystem::remove(spool / "log.meta");  // small, but frees a page
    const auto first_half = stored.size() / 2;
    log.release_through(stored[first_half].first);
    for (int i = 0; i < 3; ++i) {
      const std::string payload = "late-" + std::to_string(i);
      stored.emplace_back(log.append(payload), payload);
    }
    stored.erase(stored.begin(), stored.begin() + static_cast<long>(first_half) + 1);
    const auto records = log.read_from(0, 1000);
    ASSERT_EQ(records.size(), stored.size());
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_FALSE(records[i].damaged);
      EXPECT_EQ(records[i].offset, stored[i].first);
      EXPECT_EQ(records[i].payload, stored[i].second);
    }
  }
  // Reopened (release marks are not kept: partly released segments replay whole), every record
  // still waiting is intact and none is counted corrupt.
  SegmentLog reopened({spool, 64 << 10, 1 << 20});
  EXPECT_EQ(reopened.stats().corrupt_records, 0u);
  const auto records = reopened.read_from(stored.front().first, 1000);
  ASSERT_EQ(records.size(), stored.size());
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i].payload, stored[i].second);
}

// Issue 51: root appended spool bytes to a file through a link planted in the spool directory,
// and truncated another through log.meta.tmp (fs.protected_symlinks may be 0). `victim`
// stands for a root-only file outside the spool; every test checks it is left as it was.
class SpoolLinkTest : public SegmentLogTest {
 protected:
  void SetUp() override {
    SegmentLogTest::SetUp();
    victim_ = dir_.string() + "-victim";
    std::ofstream(victim_) << "root only\n";
    ASSERT_EQ(chmod(victim_.c_str(), 0600), 0);
    std::filesystem::create_directories(dir_);
    ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  }
  void TearDown() override {
    std::filesystem::remove(victim_);
    SegmentLogTest::TearDown();
  }
  std::string victim() const {
    std::ifstream in(victim_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void plant(const std::string& name) { std::filesystem::create_symlink(victim_, dir_ / name); }
  // Runs `f`, which must throw an error naming `name` and the link.
  template <typename F>
  void expect_refused(F f, const std::string& name) {
    try {
      f();
      ADD_FAILURE() << "a link at " << name << " was accepted";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((dir_ / name).string()), std::string::npos) << what;
      EXPECT_NE(what.find("a symbolic link is there"), std::string::npos) << what;
    }
  }
  std::filesystem::path victim_;
};

TEST_F(SpoolLinkTest, ALinkAtASegmentIsRefusedNotAppendedThrough) {
  plant("00000000000000000001.seg");
  expect_refused([&] { SegmentLog({dir_, 1 << 20, 1 << 20}).append("spooled event"); }, "00000000000000000001.seg");
  EXPECT_EQ(victim(), "root only\n");
}

TEST_F(SpoolLinkTest, ALinkAtTheNextSegmentIsRefusedNotTruncated) {
  SegmentLog log({dir_, 64, 1 << 20});
  log.append(std::string(80, 'a'));  // past segment_bytes: the next record starts segment 2
  plant("00000000000000000002.seg");
  expect_refused([&] { log.append("b"); }, "00000000000000000002.seg");
  EXPECT_EQ(victim(), "root only\n");
}

TEST_F(SpoolLinkTest, ALinkAtTheLockIsRefusedNotTruncated) {
  plant(".lock");
  expect_refused([&] { SegmentLog({dir_, 1 << 20, 1 << 20}); }, ".lock");
  EXPECT_EQ(victim(), "root only\n");
}

TEST_F(SpoolLinkTest, LogMetaIsWrittenUnderANameNobodyCanPlantInAdvance) {
  plant("log.meta.tmp");  // the fixed temporary name log.meta was written through
  {
    SegmentLog log({dir_, 64, 1 << 20});
    for (int i = 0; i < 3; i++) log.append(std::string(80, char('a' + i)));  // log.meta rewritten per segment
  }
  EXPECT_EQ(victim(), "root only\n");
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / "log.meta.tmp")) << "left alone";
  EXPECT_FALSE(std::filesystem::is_symlink(dir_ / "log.meta"));
  SegmentLog reopened({dir_, 64, 1 << 20});  // the normal path: log.meta reads back
  EXPECT_EQ(reopened.stats().records, 3u);
  EXPECT_EQ(reopened.append("d"), 4u);
}

TEST_F(SpoolLinkTest, ADirectoryOthersCanPlantLinksInIsRefusedNamingItAndWhy) {
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  try {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    ADD_FAILURE() << "a world-writable spool directory was accepted";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()), "spool: refusing directory " + dir_.string() +
                                         ": it is writable by group or others without the sticky bit (mode 0777), "
                                         "so another user can plant links where we write (chmod go-w)");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "nothing written before the check";
  // Sticky and ours, as /tmp is root's: others cannot move our files, and links are not followed.
  ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);
  { SegmentLog({dir_, 1 << 20, 1 << 20}).append("ok"); }
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
  try {
    SegmentLog log({dir_, 1 << 20, 1 << 20});
    ADD_FAILURE() << "a spool directory owned by uid 65534 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("refusing directory " + dir_.string() + ": it is owned by uid 65534"),
              std::string::npos)
        << e.what();
  }
}

TEST(SegmentLogMemory, BehavesLikeTheDiskLogWithoutADirectory) {
  SegmentLog log({{}, 100, 300});
  for (int i = 0; i < 10; ++i) log.append(std::string(90, char('a' + i)), 2);
  const auto stats = log.stats();
  EXPECT_GT(stats.dropped_records, 0u);
  EXPECT_EQ(stats.dropped_records + stats.records, 10u);
  EXPECT_EQ(log.read_from(0, 100).back().payload, std::string(90, 'j'));
}

}  // namespace
}  // namespace mcp
