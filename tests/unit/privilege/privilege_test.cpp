// Every drop runs in a forked child: dropping capabilities is irreversible, and the test
// binary must keep its own. The child reports failures as text through a pipe.
#include "privilege/privilege.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <sys/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace mcp::privilege {
namespace {

using Failures = std::vector<std::string>;

// Runs `body` in a forked child and returns what it reported as failures.
Failures in_child(const std::function<void(Failures&)>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {"pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Failures f;
    try {
      body(f);
    } catch (const std::exception& e) {
      f.push_back(std::string("exception: ") + e.what());
    }
    std::string out;
    for (auto& s : f) out += s + "\n";
    ssize_t ignored = write(fds[1], out.data(), out.size());
    (void)ignored;
    _exit(f.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Failures f;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) f.push_back(line);
  if (!WIFEXITED(status)) f.push_back("child died with status " + std::to_string(status));
  else if (WEXITSTATUS(status) != 0 && f.empty()) f.push_back("child exited non-zero");
  return f;
}

std::string join(const Failures& f) {
  std::string s;
  for (auto& x : f) s += x + "\n";
  return s;
}

#define CHECK_IN_CHILD(f, cond, msg)                                  \
  do {                                                                \
    if (!(cond)) (f).push_back(std::string(#cond) + ": " + (msg));    \
  } while (0)

bool is_root() { return geteuid() == 0; }

#define SKIP_UNLESS_ROOT()                                                              \
  if (!is_root()) GTEST_SKIP() << "needs root: drops real capabilities in a child process"

std::vector<Capability> intersect(std::vector<Capability> a, const std::vector<Capability>& b) {
  std::erase_if(a, [&](Capability c) { return std::find(b.begin(), b.end(), c) == b.end(); });
  return a;
}

bool has(const std::vector<Capability>& v, Capability c) {
  return std::find(v.begin(), v.end(), c) != v.end();
}

uint64_t bits(const std::vector<Capability>& caps) {
  uint64_t b = 0;
  for (auto c : caps) b |= uint64_t{1} << c;
  return b;
}

int create_bpf_array() {
  union bpf_attr attr {};
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 8;
  attr.max_entries = 1;
  return static_cast<int>(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
}

TEST(KernelRelease, ParsesDistributionReleaseStrings) {
  auto k = parse_kernel_release("6.1.0-18-amd64");
  EXPECT_EQ(k.major, 6);
  EXPECT_EQ(k.minor, 1);
  k = parse_kernel_release("5.10.209");
  EXPECT_EQ(k.major, 5);
  EXPECT_EQ(k.minor, 10);
  EXPECT_THROW(parse_kernel_release("linux"), Error);
  EXPECT_NO_THROW(running_kernel());
}

// CAP_SYS_ADMIN: uprobes attached after the drop need it (DropTo.UprobePmu* below shows why).
TEST(RuntimeCapabilities, ModernKernelKeepsBpfPerfmonPtraceDacReadSearchAndSysAdminOnly) {
  std::vector<Capability> want{CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF, CAP_SYS_ADMIN};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(runtime_capabilities({6, 1}), want);
  EXPECT_EQ(runtime_capabilities({5, 11}), want);
}

TEST(RuntimeCapabilities, OldKernelsNeedMemlockAndSysAdminFallbacks) {
  auto k510 = runtime_capabilities({5, 10});
  EXPECT_TRUE(has(k510, CAP_SYS_RESOURCE));  // BPF memory still charged to RLIMIT_MEMLOCK
  EXPECT_TRUE(has(k510, CAP_BPF));
  auto k54 = runtime_capabilities({5, 4});
  EXPECT_TRUE(has(k54, CAP_SYS_ADMIN));  // no CAP_BPF / CAP_PERFMON before 5.8
  EXPECT_FALSE(has(k54, CAP_BPF));
  EXPECT_FALSE(has(k54, CAP_PERFMON));
  for (auto caps : {k510, k54, runtime_capabilities({6, 8})}) {
    EXPECT_FALSE(has(caps, CAP_NET_ADMIN));
    EXPECT_FALSE(has(caps, CAP_SYS_MODULE));
    EXPECT_FALSE(has(caps, CAP_SETPCAP));
  }
}

TEST(DropTo, LeavesExactlyTheKeptSetAndSetsNoNewPrivs) {
  SKIP_UNLESS_ROOT();
  auto f = in_child([](Failures& f) {
    const auto before = permitted_capabilities();
    const auto want = intersect(runtime_capabilities(running_kernel()), before);
    auto r = drop_to(runtime_capabilities(running_kernel()));
    CHECK_IN_CHILD(f, r.kept == want, capability_list(r.kept) + " vs " + capability_list(want));
    CHECK_IN_CHILD(f, effective_capabilities() == want, capability_list(effective_capabilities()));
    CHECK_IN_CHILD(f, permitted_capabilities() == want, capability_list(permitted_capabilities()));
    CHECK_IN_CHILD(f, inheritable_capabilities().empty(), capability_list(inheritable_capabilities()));
    CHECK_IN_CHILD(f, ambient_capabilities().empty(), capability_list(ambient_capabilities()));
    CHECK_IN_CHILD(f, no_new_privs(), "PR_GET_NO_NEW_PRIVS is 0");
    if (has(before, CAP_SETPCAP)) {
      CHECK_IN_CHILD(f, r.bounding_set_reduced, "bounding set not reduced");
      CHECK_IN_CHILD(f, bounding_capabilities() == want, capability_list(bounding_capabilities()));
    }
    for (Capability gone : {CAP_SYS_MODULE, CAP_NET_ADMIN, CAP_SETPCAP, CAP_DAC_OVERRIDE}) {
      CHECK_IN_CHILD(f, !has(effective_capabilities(), gone), capability_name(gone));
      CHECK_IN_CHILD(f, !has(permitted_capabilities(), gone), capability_name(gone));
    }
    // And it cannot be taken back: raising CAP_NET_ADMIN again is refused by the kernel.
    cap_t caps = cap_get_proc();
    cap_value_t net_admin = CAP_NET_ADMIN;
    cap_set_flag(caps, CAP_PERMITTED, 1, &net_admin, CAP_SET);
    cap_set_flag(caps, CAP_EFFECTIVE, 1, &net_admin, CAP_SET);
    CHECK_IN_CHILD(f, cap_set_proc(caps) != 0 && errno == EPERM, "re-raising cap_net_admin worked");
    cap_free(caps);
  });
  EXPECT_TRUE(f.empty()) << join(f);
}

TEST(DropTo, ExecutedProgramsCannotRegainDroppedCapabilities) {
  SKIP_UNLESS_ROOT();
  // For uid 0, execve normally grants the whole bounding set again; no_new_privs and the
  // reduced bounding set are what stop a helper binary from getting it back.
  auto f = in_child([](Failures& f) {
    auto r = drop_to(runtime_capabilities(running_kernel()));
    int p[2];
    if (pipe(p) != 0) throw std::runtime_error("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      dup2(p[1], 1);
      execl("/bin/cat", "cat", "/proc/self/status", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(p[1]);
    std::string status;
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0) status.append(buf, n);
    close(p[0]);
    waitpid(pid, nullptr, 0);
    auto field = [&](const std::string& key) -> uint64_t {
      auto pos = status.find("\n" + key + ":");
      if (pos == std::string::npos) throw std::runtime_error("no " + key + " in status");
      return std::stoull(status.substr(pos + key.size() + 2), nullptr, 16);
    };
    uint64_t kept = bits(r.kept);
    CHECK_IN_CHILD(f, (field("CapPrm") & ~kept) == 0, "exec'd CapPrm exceeds the kept set");
    CHECK_IN_CHILD(f, (field("CapEff") & ~kept) == 0, "exec'd CapEff exceeds the kept set");
    CHECK_IN_CHILD(f, field("CapAmb") == 0, "exec'd ambient set not empty");
    CHECK_IN_CHILD(f, status.find("\nNoNewPrivs:\t1") != std::string::npos,
                   "exec'd program lost no_new_privs");
  });
  EXPECT_TRUE(f.empty()) << join(f);
}

TEST(DropTo, KeptCapBpfStillCreatesMapsAndDroppingItRefuses) {
  SKIP_UNLESS_ROOT();
  int probe = create_bpf_array();
  if (probe < 0) GTEST_SKIP() << "bpf(BPF_MAP_CREATE) fails even as root here: " << strerror(errno);
  close(probe);
  auto f = in_child([](Failures& f) {
    drop_to(runtime_capabilities(running_kernel()));
    int fd = create_bpf_array();
    CHECK_IN_CHILD(f, fd >= 0, std::string("map create after drop: ") + strerror(errno));
    if (fd >= 0) close(fd);
  });
  EXPECT_TRUE(f.empty()) << join(f);

  std::ifstream sysctl("/proc/sys/kernel/unprivileged_bpf_disabled");
  int disabled = 0;
  if (sysctl >> disabled && disabled != 0) {
    auto g = in_child([](Failures& f) {
      drop_to({CAP_PERFMON});
      int fd = create_bpf_array();
      CHECK_IN_CHILD(f, fd < 0 && errno == EPERM, "map create worked without CAP_BPF");
      if (fd >= 0) close(fd);
    });
    EXPECT_TRUE(g.empty()) << join(g);
  }
}

// perf_event_open(2) of the uprobe PMU, as libbpf attaches a uprobe: on /bin/sh at offset 0.
int open_uprobe_event() {
  std::ifstream type_file("/sys/bus/event_source/devices/uprobe/type");
  int type = -1;
  if (!(type_file >> type)) return -2;
  static const char kPath[] = "/bin/sh";
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = static_cast<uint32_t>(type);
  attr.config1 = reinterpret_cast<uint64_t>(kPath);
  attr.config2 = 0;
  attr.disabled = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
}

// Why the daemon keeps CAP_SYS_ADMIN: it attaches uprobes after the drop, and the kernel
// refuses the uprobe PMU to CAP_PERFMON without it (EACCES on 6.18).
TEST(DropTo, UprobePmuNeedsSysAdminAndTheKeptSetHasIt) {
  SKIP_UNLESS_ROOT();
  const int probe = open_uprobe_event();
  if (probe == -2) GTEST_SKIP() << "no uprobe PMU (/sys/bus/event_source/devices/uprobe/type)";
  if (probe < 0) GTEST_SKIP() << "uprobe perf events fail even as root here: " << strerror(errno);
  close(probe);
  auto f = in_child([](Failures& f) {
    drop_to(runtime_capabilities(running_kernel()));
    const int fd = open_uprobe_event();
    CHECK_IN_CHILD(f, fd >= 0, std::string("uprobe after the drop: ") + strerror(errno));
    if (fd >= 0) close(fd);
  });
  EXPECT_TRUE(f.empty()) << join(f);
  auto g = in_child([](Failures& f) {
    auto without = runtime_capabilities(running_kernel());
    std::erase(without, CAP_SYS_ADMIN);
    drop_to(without);
    const int fd = open_uprobe_event();
    const int err = errno;
    if (fd >= 0) close(fd);
    // A kernel that lets CAP_PERFMON open uprobes would be reported here (then the daemon
    // could drop CAP_SYS_ADMIN on it); any other refusal than EACCES is a new reason.
    CHECK_IN_CHILD(f, fd >= 0 || err == EACCES, std::string("unexpected refusal: ") + strerror(err));
    if (fd >= 0) f.push_back("note: opened without CAP_SYS_ADMIN");
  });
  if (g.size() == 1 && g[0].rfind("note:", 0) == 0)
    GTEST_SKIP() << "this kernel lets CAP_PERFMON open uprobes; CAP_SYS_ADMIN is not needed here";
  EXPECT_TRUE(g.empty()) << join(g);
}

TEST(DropTo, CapabilitiesNotHeldAreReportedMissingNotGained) {
  SKIP_UNLESS_ROOT();
  auto f = in_child([](Failures& f) {
    // Give up CAP_BPF first, as a restrictive container runtime would.
    auto perm = permitted_capabilities();
    std::erase(perm, CAP_BPF);
    cap_t caps = cap_init();
    cap_set_flag(caps, CAP_PERMITTED, perm.size(), perm.data(), CAP_SET);
    cap_set_flag(caps, CAP_EFFECTIVE, perm.size(), perm.data(), CAP_SET);
    if (cap_set_proc(caps) != 0) throw std::runtime_error("setup cap_set_proc failed");
    cap_free(caps);
    auto r = drop_to({CAP_BPF, CAP_PERFMON});
    CHECK_IN_CHILD(f, r.missing == std::vector<Capability>{CAP_BPF}, capability_list(r.missing));
    CHECK_IN_CHILD(f, !has(effective_capabilities(), CAP_BPF), "cap_bpf came back");
    CHECK_IN_CHILD(f, has(effective_capabilities(), CAP_PERFMON) == has(perm, CAP_PERFMON),
                   capability_list(effective_capabilities()));
  });
  EXPECT_TRUE(f.empty()) << join(f);
}

TEST(DropTo, RefusesWhileOtherThreadsRunAndChangesNothing) {
  // Needs no privileges: the refusal comes before any capability call.
  auto f = in_child([](Failures& f) {
    auto before = effective_capabilities();
    bool nnp_before = no_new_privs();
    std::atomic<bool> done{false};
    std::thread t([&] {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    try {
      drop_to({});
      f.push_back("drop_to succeeded with two threads");
    } catch (const Error& e) {
      CHECK_IN_CHILD(f, std::string(e.what()).find("threads") != std::string::npos, e.what());
    }
    done = true;
    t.join();
    CHECK_IN_CHILD(f, effective_capabilities() == before, "capabilities changed");
    CHECK_IN_CHILD(f, no_new_privs() == nnp_before, "no_new_privs changed");
  });
  EXPECT_TRUE(f.empty()) << join(f);
}

TEST(CapabilityNames, UseLibcapSpelling) {
  EXPECT_EQ(capability_name(CAP_BPF), "cap_bpf");
  EXPECT_EQ(capability_list({CAP_SYS_PTRACE, CAP_PERFMON}), "cap_sys_ptrace,cap_perfmon");
  EXPECT_EQ(capability_list({}), "(none)");
}

}  // namespace
}  // namespace mcp::privilege
