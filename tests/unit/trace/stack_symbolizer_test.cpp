// The stack symbolizer on real files and real kernel symbols: frames of this test binary by
// build id and by mapping, a file no process maps any more, an unknown build id, kallsyms.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <climits>
#include <fstream>
#include <sstream>

#include "files.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"
#include "symbolize/stack_symbolizer.h"

extern "C" __attribute__((noinline, used)) int mcp_stack_target(int x) {
  asm volatile("" ::: "memory");
  return x * 7 + 1;
}
extern "C" __attribute__((noinline, used)) int mcp_stack_other(int x) {
  asm volatile("" ::: "memory");
  return x * 5 + 3;
}

namespace mcp::symbolize {
namespace {

using test::self_exe;

std::array<uint8_t, 20> build_id_bytes(const std::string& hex) {
  std::array<uint8_t, 20> out{};
  for (size_t i = 0; i < out.size() && 2 * i + 1 < hex.size(); i++)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

// A user frame at `addr` in this process as the kernel gives it: with its build id and file
// offset (by_build_id) or the address alone.
Event event_at(uint64_t addr, bool by_build_id, pid_t pid = getpid()) {
  Event e;
  e.pid = static_cast<uint32_t>(pid);
  e.captured_stack.user = {addr};
  CapturedStack::BuildIdFrame f;
  if (by_build_id) {
    for (const auto& m : loader::read_proc_maps(getpid()))
      if (addr >= m.start && addr < m.end) f.file_offset = addr - m.start + m.offset;
    f.build_id = build_id_bytes(loader::read_build_id(self_exe()));
    f.valid = true;
  }
  e.captured_stack.user_ids = {f};
  return e;
}

uint64_t address_of(int (*fn)(int)) { return reinterpret_cast<uint64_t>(fn); }

TEST(StackSymbolizer, AFrameOfThisBinaryIsNamedByBuildIdAndByMapping) {
  ASSERT_FALSE(loader::read_build_id(self_exe()).empty()) << "the test binary has no build id";
  ASSERT_EQ(mcp_stack_target(1), 8);
  for (bool by_build_id : {true, false}) {
    StackSymbolizer s;
    Event e = event_at(address_of(mcp_stack_target) + 3, by_build_id);
    s.symbolize(e);
    ASSERT_EQ(e.stack.size(), 1u);
    EXPECT_EQ(e.stack[0].sym, "mcp_stack_target");
    EXPECT_EQ(e.stack[0].offset, 3u);
    EXPECT_EQ(e.stack[0].module, self_exe());
    EXPECT_EQ(e.stack[0].addr, address_of(mcp_stack_target) + 3);
    ASSERT_EQ(e.attributes.size(), 1u);
    EXPECT_EQ(e.attributes[0], (std::pair<std::string, std::string>{"code.stacktrace",
                                                                     "mcp_stack_target+0x3 (" + self_exe() + ")"}));
  }
}

// The process is gone (no such pid): a file the agent was told about (a probe's) is still
// found by its build id; an unknown build id keeps module and offset, never a guessed name.
TEST(StackSymbolizer, AGoneProcessKeepsNamesOfKnownFilesAndModulePlusOffsetOtherwise) {
  const pid_t gone = 0x3ffffff0;
  StackSymbolizer s;
  s.add_file(self_exe());
  Event e = event_at(address_of(mcp_stack_other), true, gone);
  s.symbolize(e);
  ASSERT_EQ(e.stack.size(), 1u);
  EXPECT_EQ(e.stack[0].sym, "mcp_stack_other");
  EXPECT_EQ(e.stack[0].offset, 0u);

  StackSymbolizer fresh;
  Event u = event_at(address_of(mcp_stack_other), true, gone);
  u.captured_stack.user_ids[0].build_id.fill(0xab);
  const uint64_t file_offset = u.captured_stack.user_ids[0].file_offset;
  fresh.symbolize(u);
  ASSERT_EQ(u.stack.size(), 1u);
  EXPECT_EQ(u.stack[0].sym, "[unknown]");
  EXPECT_EQ(u.stack[0].module, "build-id:abababababababababababababababababababab");
  EXPECT_EQ(u.stack[0].offset, file_offset);

  Event none = event_at(address_of(mcp_stack_other), false, gone);  // no build id, no mappings
  fresh.symbolize(none);
  EXPECT_EQ(none.stack[0].sym, "[unknown]");
  EXPECT_EQ(none.stack[0].module, "[unknown]");
}

TEST(StackSymbolizer, OneCachedFileStillNamesFramesOfTwoFilesInTurn) {
  StackSymbolizer s(StackSymbolizer::Limits{1, 1, 16});
  void* libc_fn = reinterpret_cast<void*>(&::getppid);
  for (int round = 0; round < 3; round++) {
    Event mine = event_at(address_of(mcp_stack_target), false);
    Event libc = event_at(reinterpret_cast<uint64_t>(libc_fn), false);
    s.symbolize(mine);
    s.symbolize(libc);
    EXPECT_EQ(mine.stack[0].sym, "mcp_stack_target");
    EXPECT_EQ(libc.stack[0].sym, "getppid");
    EXPECT_NE(libc.stack[0].module.find("libc"), std::string::npos) << libc.stack[0].module;
  }
}

// A file learned from a process's mappings is opened by its own path when the process shares
// the agent's root, not through /proc/PID/root, which goes with the process: its frames are
// still named after it exits, with its symbol table long evicted.
TEST(StackSymbolizer, AFileLearnedFromAnExitedProcessStaysNameable) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  StackSymbolizer s(StackSymbolizer::Limits{1, 4, 256});
  Event learn = event_at(address_of(mcp_stack_target), false, child);  // through the child's maps
  s.symbolize(learn);
  EXPECT_EQ(learn.stack[0].sym, "mcp_stack_target");
  Event evict = event_at(reinterpret_cast<uint64_t>(&::getppid), false, child);
  s.symbolize(evict);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  Event after = event_at(address_of(mcp_stack_target), true, child);
  s.symbolize(after);
  EXPECT_EQ(after.stack[0].sym, "mcp_stack_target");
  EXPECT_EQ(after.stack[0].module, self_exe());
}

TEST(StackSymbolizer, KernelFramesAreNamedFromKallsyms) {
  std::ifstream in("/proc/kallsyms");
  std::string line, addr, type, name;
  uint64_t a = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    f >> addr >> type >> name;
    a = std::strtoull(addr.c_str(), nullptr, 16);
    if (a && (type == "T" || type == "t") && name == "do_sys_openat2") break;
    a = 0;
  }
  if (!a) GTEST_SKIP() << "kallsyms hides addresses or lacks do_sys_openat2";
  StackSymbolizer s;
  Event e;
  e.captured_stack.kernel = {a + 5};
  s.symbolize(e);
  ASSERT_EQ(e.stack.size(), 1u);
  EXPECT_EQ(e.stack[0].sym, "do_sys_openat2");
  EXPECT_EQ(e.stack[0].offset, 5u);
  EXPECT_EQ(e.stack[0].module, "[kernel]");
}

TEST(StackSymbolizer, AnEventWithoutAStackIsLeftAlone) {
  StackSymbolizer s;
  Event e;
  e.attributes = {{"k", "v"}};
  s.symbolize(e);
  EXPECT_TRUE(e.stack.empty());
  EXPECT_EQ(e.attributes.size(), 1u);
}

}  // namespace
}  // namespace mcp::symbolize
