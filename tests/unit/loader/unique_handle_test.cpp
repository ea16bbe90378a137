// UniqueHandle (common/unique_handle.h): frees its handle exactly once, whoever holds it last.
#include "common/unique_handle.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

namespace {

std::vector<int> g_freed;
void record_free(int h) { g_freed.push_back(h); }
using Counted = mcp::UniqueHandle<int, record_free, -1>;

TEST(UniqueHandle, FreesOnceWhenTheLastOwnerGoes) {
  g_freed.clear();
  {
    Counted a(7);
    Counted b(std::move(a));
    EXPECT_FALSE(a);
    Counted c;
    c = std::move(b);
    EXPECT_TRUE(g_freed.empty());
    std::vector<Counted> many;
    many.push_back(std::move(c));
    many.emplace_back(8);
  }
  EXPECT_EQ(g_freed, (std::vector<int>{7, 8}));
}

TEST(UniqueHandle, ResetFreesTheOldAndAssignmentFreesWhatWasHeld) {
  g_freed.clear();
  Counted a(1);
  a.reset(2);
  EXPECT_EQ(g_freed, std::vector<int>{1});
  Counted b(3);
  b = std::move(a);
  EXPECT_EQ(g_freed, (std::vector<int>{1, 3}));
  EXPECT_EQ(b.get(), 2);
  EXPECT_EQ(b.release(), 2);
  b.reset();
  EXPECT_EQ(g_freed, (std::vector<int>{1, 3}));
}

TEST(UniqueHandle, ANegativeIntegerIsNoneAndNeverFreed) {
  g_freed.clear();
  {
    Counted failed(-22);  // libbpf's -errno
    EXPECT_FALSE(failed);
  }
  EXPECT_TRUE(g_freed.empty());
}

TEST(UniqueFd, ClosesItsDescriptor) {
  int raw;
  {
    mcp::UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    raw = fd.get();
    EXPECT_EQ(fcntl(raw, F_GETFD), FD_CLOEXEC);
  }
  EXPECT_EQ(fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
