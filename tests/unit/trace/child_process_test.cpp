// `-- COMMAND ARGS` children: held before exec until start(), real exit statuses,
// exec failures reported as errors, no child left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "cli/child_process.h"
#include "common/error.h"

namespace mcp::cli {
namespace {

// Polls until the child exits; the deadline only guards against a hang.
std::optional<int> wait_exit(ChildProcess& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = c.poll_exit()) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::nullopt;
}

std::string exe_of(pid_t pid) {
  char buf[PATH_MAX];
  const ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool reaped(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

TEST(ChildProcess, TrueExitsZero) {
  ChildProcess c({"/bin/true"});
  EXPECT_GT(c.pid(), 0);
  c.start();
  EXPECT_EQ(wait_exit(c), 0);
  EXPECT_EQ(c.poll_exit(), 0);  // stays known after reaping
}

TEST(ChildProcess, ShellExitStatusIsReported) {
  ChildProcess c({"/bin/sh", "-c", "exit 3"});
  c.start();
  EXPECT_EQ(wait_exit(c), 3);
}

TEST(ChildProcess, ProgramIsFoundThroughPath) {
  ChildProcess c({"sh", "-c", "exit 5"});
  c.start();
  EXPECT_EQ(wait_exit(c), 5);
}

TEST(ChildProcess, DeathBySignalIs128PlusSignal) {
  ChildProcess c({"/bin/sh", "-c", "kill -KILL $$"});
  c.start();
  EXPECT_EQ(wait_exit(c), 128 + SIGKILL);
}

TEST(ChildProcess, HeldBeforeExecUntilStart) {
  ChildProcess c({"/bin/true"});
  // Not yet exec'd: still a copy of this test binary, blocked, not exited.
  EXPECT_EQ(exe_of(c.pid()), exe_of(getpid()));
  EXPECT_FALSE(c.poll_exit().has_value());
  c.start();
  EXPECT_EQ(wait_exit(c), 0);
}

// Issue 50: a program that exits at once (`true`) is stopped after exec until at_exec has read
// what only the live process shows (its executable's mapping); then it runs on and exits.
TEST(ChildProcess, AtExecSeesTheProgramMappedBeforeItRuns) {
  ChildProcess c({"true"});
  bool mapped = false;
  pid_t seen = 0;
  c.start([&](pid_t pid) {
    seen = pid;
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) mapped |= line.find("/true") != std::string::npos;
  });
  EXPECT_EQ(seen, c.pid());
  EXPECT_TRUE(mapped) << "the program's own file was mapped when at_exec ran";
  EXPECT_EQ(wait_exit(c), 0);
}

TEST(ChildProcess, ExecFailureThrowsRuntimeErrorNamingTheCommand) {
  for (const std::string prog : {"/nonexistent/mcp-prog", "mcp-no-such-program-in-path"}) {
    ChildProcess c({prog, "arg"});
    try {
      c.start();
      ADD_FAILURE() << "started " << prog;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find(prog), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.poll_exit(), 127);
    EXPECT_TRUE(reaped(c.pid()));
  }
}

TEST(ChildProcess, DestructorTerminatesAndReapsARunningChild) {
  pid_t pid;
  {
    ChildProcess c({"/bin/sleep", "30"});
    pid = c.pid();
    c.start();
    EXPECT_FALSE(c.poll_exit().has_value());
  }
  EXPECT_TRUE(reaped(pid));
}

TEST(ChildProcess, DestructorReapsAChildNeverStarted) {
  pid_t pid;
  {
    ChildProcess c({"/bin/true"});
    pid = c.pid();
  }
  EXPECT_TRUE(reaped(pid));
}

TEST(ChildProcess, TerminateEndsTheChildWithSigterm) {
  ChildProcess c({"/bin/sleep", "30"});
  c.start();
  c.terminate();
  EXPECT_EQ(wait_exit(c), 128 + SIGTERM);
}

}  // namespace
}  // namespace mcp::cli
