// Install to first events with zero edits (issue 16). The .deb is built with CPack from this
// build tree and unpacked with `dpkg-deb -x` into a scratch root; then the broker and the
// agent run exactly as their units start them, since systemd is not PID 1 here:
//   - argv is the unit's ExecStart= line and the environment its Environment= lines;
//   - StateDirectory=NAME becomes STATE_DIRECTORY=/var/lib/NAME (created), as systemd does;
//     RuntimeDirectory=NAME creates /run/NAME;
//   - the only rewrite: absolute paths (/usr/..., /etc/..., /var/...) are prefixed with the
//     scratch root, in argv and in the environment. The packaged default config is used as
//     shipped (it names no file).
// The packaged addresses (the broker's unix:/run/mcp-sampling/broker.sock, metrics on
// 127.0.0.1:9464) are used as shipped, inside private network and mount namespaces (a tmpfs on
// /run, and an /etc/group holding the mcp-sampling group postinst would create), so they cannot
// collide with anything on the machine. Root and BPF are needed.
#include <gtest/gtest.h>
#include <grp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "../../support/run_command.h"
#include "../../support/wait_until.h"
#include "../../unit/packaging/test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using mcp::test::wait_until;
using mcp::packaging_test::build_deb;
using mcp::test::slurp;
using mcp::test::TempDir;

struct UnitCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string in_root(const fs::path& root, const std::string& value) {
  return !value.empty() && value[0] == '/' ? (root / value.substr(1)).string() : value;
}

// ExecStart=, Environment= and StateDirectory= of a unit file, paths moved under `root`.
UnitCommand unit_command(const fs::path& unit, const fs::path& root) {
  UnitCommand c;
  std::istringstream in(slurp(unit));
  for (std::string line; std::getline(in, line);) {
    auto value = [&](const std::string& key) -> std::optional<std::string> {
      if (line.rfind(key + "=", 0) != 0) return std::nullopt;
      return line.substr(key.size() + 1);
    };
    if (auto v = value("ExecStart")) {
      c.argv.clear();
      for (const auto& w : split_words(*v)) c.argv.push_back(in_root(root, w));
    } else if (auto v = value("Environment")) {
      for (auto w : split_words(*v)) {
        if (w.size() > 1 && w.front() == '"' && w.back() == '"') w = w.substr(1, w.size() - 2);
        const auto eq = w.find('=');
        if (eq != std::string::npos) c.env[w.substr(0, eq)] = in_root(root, w.substr(eq + 1));
      }
    } else if (auto v = value("StateDirectory")) {
      const std::string dir = in_root(root, "/var/lib/" + *v);
      fs::create_directories(dir);
      c.env["STATE_DIRECTORY"] = dir;
    } else if (auto v = value("RuntimeDirectory")) {
      fs::create_directories("/run/" + *v);  // the private /run (private_namespaces)
    }
  }
  return c;
}

class Process {
 public:
  Process(const UnitCommand& c, const fs::path& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      for (const auto& [k, v] : c.env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string log() const { return mcp::test::slurp(log_); }
  bool exited() {
    int st = 0;
    if (pid_ > 0 && waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return pid_ < 0;
  }
  int terminate() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return status_;
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int status_ = -1;
};

constexpr gid_t kGroupId = 64999;  // mcp-sampling in the private /etc/group

// Network and mount namespaces of our own: loopback up (the packaged fixed ports are ours), a
// tmpfs on /run, and /etc/group with the group postinst creates.
std::string private_namespaces(const fs::path& scratch) {
  if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) return std::string("unshare: ") + std::strerror(errno);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0)
    return std::string("a private /run: ") + std::strerror(errno);
  const fs::path group = scratch / "group";
  std::ofstream(group) << slurp("/etc/group") << "mcp-sampling:x:" << kGroupId << ":\n";
  if (mount(group.c_str(), "/etc/group", nullptr, MS_BIND, nullptr) != 0)
    return std::string("binding /etc/group: ") + std::strerror(errno);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr{};
  std::strcpy(ifr.ifr_name, "lo");
  const bool ok = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && ((ifr.ifr_flags |= IFF_UP), true) &&
                  ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  if (fd >= 0) close(fd);
  return ok ? "" : std::string("bringing lo up: ") + std::strerror(errno);
}

std::set<std::string> bpffs_entries() {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator("/sys/fs/bpf", ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    out.insert(it->path().string());
  return out;
}

// connect(2) to a unix socket from a child running as `uid` with supplementary `groups`:
// 0 or the errno.
int connect_as(const std::string& path, uid_t uid, const std::vector<gid_t>& groups) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(200);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    _exit(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : errno);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(DebInstall, PackagedUnitsAndDefaultConfigDeliverEventsToSubscribe) {
  MCP_REQUIRE_BPF();
  for (std::string tool : {"cpack", "dpkg-deb"})
    if (!mcp::packaging_test::have_tool(tool)) GTEST_SKIP() << tool << " not installed (scripts/setup)";
  const fs::path build_dir = fs::path(MCP_BIN_DIR).parent_path();
  TempDir dir;
  std::string cpack_log;
  const fs::path deb = build_deb(build_dir, dir.path(), &cpack_log);
  ASSERT_FALSE(deb.empty()) << cpack_log;
  const fs::path root = dir.path() / "root";
  auto unpack = mcp::packaging_test::run_shell("dpkg-deb -x " + deb.string() + " " + root.string());
  ASSERT_EQ(unpack.exit_code, 0) << unpack.out;
  const std::string why = private_namespaces(dir.path());
  if (!why.empty()) GTEST_SKIP() << "no private namespaces: " << why;

  const auto broker_cmd = unit_command(root / "lib/systemd/system/mcp-broker.service", root);
  const auto agent_cmd = unit_command(root / "lib/systemd/system/mcp-agent.service", root);
  ASSERT_EQ(agent_cmd.argv.at(0), (root / "usr/bin/mcp-agent").string());
  ASSERT_TRUE(fs::exists(root / "etc/mcp-agent/agent.yaml"));
  ASSERT_EQ(agent_cmd.env.at("STATE_DIRECTORY"), (root / "var/lib/mcp-agent").string());
  const auto pins_before = bpffs_entries();

  Process broker(broker_cmd, dir.path() / "broker.log");
  const std::string socket = "/run/mcp-sampling/broker.sock";
  ASSERT_TRUE(wait_until([&] { return broker.log().find("listening on unix:" + socket) != std::string::npos; }, 30s))
      << broker.log();
  // Issue 29: on loopback TCP any local user read root's events and pushed policies. The socket
  // lets in root and the group only: the kernel decides, for a real unprivileged process.
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kGroupId);
  EXPECT_EQ(connect_as(socket, 65534, {}), EACCES) << "user nobody connected";
  EXPECT_EQ(connect_as(socket, 65534, {kGroupId}), 0) << "a member of mcp-sampling could not connect";
  {
    Process agent(agent_cmd, dir.path() / "agent.log");
    ASSERT_TRUE(wait_until([&] { return agent.log().find("mcp-agent running") != std::string::npos || agent.exited(); },
                         60s))
        << agent.log();
    ASSERT_FALSE(agent.exited()) << agent.log();
    EXPECT_EQ(agent.log().find("waiting"), std::string::npos) << "nothing to wait for in the default:\n" << agent.log();

    // What the README tells a new user to run.
    const fs::path sub_out = dir.path() / "subscribe.out";
    Process subscriber({{agent_cmd.argv[0], "subscribe", "--broker", "unix:" + socket, "--max-events", "5"}, {}},
                       sub_out);
    // The default traces execve, openat and connect node-wide: starting programs makes events.
    const bool got = wait_until([&] {
      mcp::test::run_shell({"/bin/true"});
      return subscriber.exited();
    }, 60s);
    ASSERT_TRUE(got) << "no events within 60 s\nsubscribe: " << mcp::test::slurp(sub_out) << "\nagent: " << agent.log()
                     << "\nbroker: " << broker.log();
    EXPECT_EQ(subscriber.terminate(), 0) << mcp::test::slurp(sub_out);
    const auto events = mcp::test::parse_json_lines(mcp::test::slurp(sub_out));
    ASSERT_EQ(events.size(), 5u) << mcp::test::slurp(sub_out);
    for (const auto& e : events) {
      EXPECT_EQ(e["kind"], "syscall") << e;
      const std::string probe = e["probe"];
      EXPECT_TRUE(probe == "syscall:execve" || probe == "syscall:openat" || probe == "syscall:connect") << e;
    }
    EXPECT_EQ(agent.terminate(), 0) << agent.log();
  }
  EXPECT_EQ(broker.terminate(), 0) << broker.log();
  EXPECT_EQ(bpffs_entries(), pins_before) << "the agent must leave nothing pinned in /sys/fs/bpf";
}

}  // namespace
