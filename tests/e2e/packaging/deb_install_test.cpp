// Install to first events with zero edits (issue 16). The .deb is built with CPack from this
// build tree and unpacked with `dpkg-deb -x` into a scratch root; then the broker and the
// agent run exactly as their units start them, since systemd is not PID 1 here:
//   - argv is the unit's ExecStart= line and the environment its Environment= lines;
//   - StateDirectory=NAME becomes STATE_DIRECTORY=/var/lib/NAME (created), as systemd does;
//   - the only rewrite: absolute paths (/usr/..., /etc/..., /var/...) are prefixed with the
//     scratch root, in argv and in the environment. The packaged default config is used as
//     shipped (it names no file).
// The packaged ports (127.0.0.1:9090, 9464) are used as shipped, inside a private network
// namespace so they cannot collide with anything on the machine. Root and BPF are needed.
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A network namespace of our own with loopback up: the packaged fixed ports are ours.
std::string private_loopback() {
  if (unshare(CLONE_NEWNET) != 0) return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
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
  auto unpack = mcp::packaging_test::run_command("dpkg-deb -x " + deb.string() + " " + root.string());
  ASSERT_EQ(unpack.status, 0) << unpack.output;
  const std::string why = private_loopback();
  if (!why.empty()) GTEST_SKIP() << "no private network namespace: " << why;

  const auto broker_cmd = unit_command(root / "lib/systemd/system/mcp-broker.service", root);
  const auto agent_cmd = unit_command(root / "lib/systemd/system/mcp-agent.service", root);
  ASSERT_EQ(agent_cmd.argv.at(0), (root / "usr/bin/mcp-agent").string());
  ASSERT_TRUE(fs::exists(root / "etc/mcp-agent/agent.yaml"));
  ASSERT_EQ(agent_cmd.env.at("STATE_DIRECTORY"), (root / "var/lib/mcp-agent").string());
  const auto pins_before = bpffs_entries();

  Process broker(broker_cmd, dir.path() / "broker.log");
  ASSERT_TRUE(wait_until([&] { return broker.log().find("listening on 127.0.0.1:9090") != std::string::npos; }, 30s))
      << broker.log();
  {
    Process agent(agent_cmd, dir.path() / "agent.log");
    ASSERT_TRUE(wait_until([&] { return agent.log().find("mcp-agent running") != std::string::npos || agent.exited(); },
                         60s))
        << agent.log();
    ASSERT_FALSE(agent.exited()) << agent.log();
    EXPECT_EQ(agent.log().find("waiting"), std::string::npos) << "nothing to wait for in the default:\n" << agent.log();

    // What the README tells a new user to run.
    const fs::path sub_out = dir.path() / "subscribe.out";
    Process subscriber({{agent_cmd.argv[0], "subscribe", "--broker", "127.0.0.1:9090", "--max-events", "5"}, {}},
                       sub_out);
    // The default traces execve, openat and connect node-wide: starting programs makes events.
    const bool got = wait_until([&] {
      mcp::test::run_command({"/bin/true"});
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
