// The container image as a cluster runs it (issue 32). scripts/image builds the OCI archive
// from this build tree's .deb (mmdebstrap from deb.debian.org, umoci); the test then treats the
// archive as a registry would hand it over: it extracts the archive with tar and the image's
// layers with `umoci unpack` (never scripts/image's staging folder), and runs the programs
// from that root through chroot the way the DaemonSet does: host PID namespace (/proc), the
// host's /sys (BTF, bpffs, tracefs, cgroups) and /dev. Every mount is made in a child with
// its own mount and network namespace, so none outlives it or is seen by the cleanup.
// Needs root, mmdebstrap, umoci and the Debian mirror; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../../support/run_command.h"
#include "../../unit/packaging/test_util.h"

namespace mcp::packaging_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kBinDir = MCP_BIN_DIR;
const fs::path kBuildDir = kBinDir.parent_path();
const fs::path kWorkload = fs::path(MCP_TEST_DIR) / "mcp-workload";

std::string quote(const fs::path& p) { return mcp::test::shell_quote(p.string()); }

// Runs `script` with sh in a child that has its own mount and network namespaces (loopback
// up), with /proc, /sys and /dev of the host bound into `root`: the view of a hostPID pod
// with the DaemonSet's host mounts. Output (stdout and stderr) in the result; the child is
// killed after `timeout`.
CommandResult in_image(const fs::path& root, const std::string& script, std::chrono::seconds timeout) {
  TempDir dir("mcp-image-run");
  const fs::path log = dir.path() / "log";
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (!f) _exit(120);
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    setpgid(0, 0);
    auto fail = [](const char* what) {
      std::fprintf(stderr, "in_image: %s: %s\n", what, std::strerror(errno));
      _exit(121);
    };
    if (unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) fail("unshare");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("making / private");
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) fail("reading lo");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) fail("bringing lo up");
    close(fd);
    for (const char* m : {"proc", "sys", "dev"}) {
      const fs::path target = root / m;
      fs::create_directories(target);
      if (mount((std::string("/") + m).c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) fail(m);
    }
    setenv("R", root.c_str(), 1);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      r.out = "(killed after " + std::to_string(timeout.count()) + " s)\n";
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  kill(-pid, SIGKILL);  // anything the script left in the background
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(log) + r.out;
  return r;
}

// A process on the host (outside the image) calling getppid() 200 times a second.
class Workload {
 public:
  Workload() {
    pid_ = fork();
    if (pid_ == 0) {
      execl(kWorkload.c_str(), "mcp-workload", "rate", "200", "60", "getppid", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Workload() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

class Image : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) skip_reason_ = "needs root (mmdebstrap's root mode, chroot)";
    for (std::string tool : {"mmdebstrap", "umoci", "cpack", "dpkg-deb", "chroot", "tar"})
      if (!have_tool(tool)) skip_reason_ = tool + " not installed (scripts/setup installs it)";
    for (std::string bin : {"mcp-agent", "mcp-broker"})
      if (!fs::exists(kBinDir / bin)) skip_reason_ = bin + " is not built in " + kBinDir.string();
    if (!skip_reason_.empty()) return;
    const fs::path deb = cached_deb(kBuildDir, &log_);
    if (deb.empty()) return;
    version_ = run_shell("dpkg-deb -f " + quote(deb) + " Version").out;
    version_.erase(version_.find_last_not_of('\n') + 1);
    // One image per package, shared by the test processes like the package.
    archive_ = deb.parent_path() / "mcp-sampling.oci.tar";
    if (!fs::exists(archive_)) {
      const auto r = run_shell(quote(source_dir() / "scripts/image") + " --deb " + quote(deb) + " --output " +
                                 quote(archive_));
      log_ = r.out;
      if (r.exit_code != 0) {
        fs::remove(archive_);
        static const std::regex offline("Failed to fetch|Could not resolve|Temporary failure resolving|"
                                        "Network is unreachable|Unable to connect");
        if (std::regex_search(r.out, offline))
          skip_reason_ = "the Debian mirror is unreachable, so the image cannot be built:\n" + r.out;
        archive_.clear();
        return;
      }
    }
    dir_ = new TempDir("mcp-image");
    fs::create_directories(dir_->path() / "layout");
    unpack_ = run_shell("tar -xf " + quote(archive_) + " -C " + quote(dir_->path() / "layout") +
                          " && umoci unpack --image " + quote(dir_->path() / ("layout:" + version_)) + " " +
                          quote(dir_->path() / "bundle"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_FALSE(archive_.empty()) << "no image; cpack or scripts/image said:\n" << log_;
    ASSERT_EQ(unpack_.exit_code, 0) << unpack_.out;
  }
  static fs::path root() { return dir_->path() / "bundle/rootfs"; }
  static nlohmann::json blob(const std::string& digest) {
    return nlohmann::json::parse(slurp(dir_->path() / "layout/blobs/sha256" / digest.substr(digest.find(':') + 1)));
  }

  static inline std::string skip_reason_;
  static inline std::string log_;
  static inline std::string version_;
  static inline fs::path archive_;
  static inline TempDir* dir_ = nullptr;
  static inline CommandResult unpack_;
};

TEST_F(Image, ArchiveHoldsOneTaggedImageWithBothProgramsAndNoToolchain) {
  const auto index = nlohmann::json::parse(slurp(dir_->path() / "layout/index.json"));
  ASSERT_EQ(index["manifests"].size(), 1u) << index;
  EXPECT_EQ(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], version_);
  const auto manifest = blob(index["manifests"][0]["digest"]);
  const auto config = blob(manifest["config"]["digest"]);
  EXPECT_EQ(config["os"], "linux");
  EXPECT_EQ(config["architecture"], "amd64");
  EXPECT_EQ(config["config"]["Entrypoint"], nlohmann::json::array({"/usr/bin/mcp-agent"}));
  uint64_t layers = 0;
  for (const auto& l : manifest["layers"]) layers += l["size"].get<uint64_t>();
  uint64_t unpacked = 0;
  for (const auto& e : fs::recursive_directory_iterator(root()))
    if (e.is_regular_file() && !e.is_symlink()) unpacked += e.file_size();
  std::cout << "image: archive " << fs::file_size(archive_) / 1024 / 1024 << " MiB, layers " << layers / 1024 / 1024
            << " MiB compressed, root " << unpacked / 1024 / 1024 << " MiB unpacked\n";
  RecordProperty("image_archive_bytes", std::to_string(fs::file_size(archive_)));
  RecordProperty("image_root_bytes", std::to_string(unpacked));
  // Runtime libraries only: the binaries and what they link come to about 50 MiB.
  EXPECT_LT(unpacked, 100ull << 20) << "the image's root grew past 100 MiB";

  for (const char* p : {"usr/bin/mcp-agent", "usr/bin/mcp-broker", "etc/mcp-agent/agent.yaml",
                        "usr/share/doc/mcp-sampling/copyright", "usr/share/doc/libc6/copyright", "etc/passwd"})
    EXPECT_TRUE(fs::exists(root() / p)) << p;
  // No toolchain, no headers, no shell, no package manager.
  for (const char* p : {"usr/include", "usr/lib/gcc", "usr/bin/gcc", "usr/bin/cc", "usr/bin/c++", "usr/bin/ld",
                        "usr/bin/clang", "bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/dpkg", "usr/bin/apt"})
    EXPECT_FALSE(fs::exists(fs::symlink_status(root() / p))) << p << " is in the image";
  EXPECT_EQ(fs::status(root() / "var/lib/mcp-broker").permissions() & fs::perms::owner_write, fs::perms::owner_write);

  if (have_tool("skopeo")) {  // a second reader of the archive format
    const auto r = run_shell("skopeo inspect oci-archive:" + quote(archive_));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"Architecture\": \"amd64\""), std::string::npos) << r.out;
  }
}

TEST_F(Image, EverySharedLibraryResolvesInsideTheImage) {
  for (const char* bin : {"/usr/bin/mcp-agent", "/usr/bin/mcp-broker"}) {
    // What ldd does (the image has no shell for ldd's script): the dynamic loader's list mode.
    const auto r = run_shell("chroot " + quote(root()) + " /lib64/ld-linux-x86-64.so.2 --list " + bin);
    EXPECT_EQ(r.exit_code, 0) << bin << ":\n" << r.out;
    EXPECT_EQ(r.out.find("not found"), std::string::npos) << bin << ":\n" << r.out;
    EXPECT_NE(r.out.find("libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6"), std::string::npos) << r.out;
    const auto help = run_shell("chroot " + quote(root()) + " " + bin + " --help");
    EXPECT_EQ(help.exit_code, 0) << bin << " --help in the image:\n" << help.out;
  }
  const auto version = run_shell("chroot " + quote(root()) + " /usr/bin/mcp-agent version");
  EXPECT_NE(version.out.find("mcp-agent " + version_), std::string::npos) << version.out;
}

TEST_F(Image, AgentInTheImageTracesAHostProcessSyscall) {
  MCP_REQUIRE_BPF();
  Workload w;
  const auto r = in_image(root(),
                          "chroot \"$R\" /usr/bin/mcp-agent trace -s getppid --pid " + std::to_string(w.pid()) +
                              " -d 2s; echo \"exit=$?\" >&2",
                          60s);
  ASSERT_NE(r.out.find("exit=0"), std::string::npos) << r.out;
  std::vector<nlohmann::json> events;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{", 0) == 0) events.push_back(nlohmann::json::parse(line));
  // 200 calls/s for 2 s, every one kept (rate 1).
  EXPECT_GT(events.size(), 100u) << r.out.substr(0, 4000);
  for (const auto& e : events) {
    EXPECT_EQ(e["probe"], "syscall:getppid") << e;
    EXPECT_EQ(e["pid"], w.pid()) << e;
  }
}

TEST_F(Image, BrokerAndSubscriberInTheImageDeliverTheAgentsEvents) {
  MCP_REQUIRE_BPF();
  Workload w;
  // Broker, subscriber and agent, all from the image, on the namespace's own loopback.
  const std::string script = R"(
    out=$(mktemp -d)
    chroot "$R" /usr/bin/mcp-broker --listen 127.0.0.1:9090 >"$out/broker" 2>&1 &
    i=0; until grep -q 'listening on 127.0.0.1:9090' "$out/broker"; do
      i=$((i + 1)); [ $i -lt 300 ] || { echo "broker did not start:"; cat "$out/broker"; exit 1; }; sleep 0.1
    done
    chroot "$R" /usr/bin/mcp-agent subscribe --broker 127.0.0.1:9090 --max-events 5 >"$out/sub" 2>"$out/sub.err" &
    sub=$!
    sleep 1
    chroot "$R" /usr/bin/mcp-agent trace -s getppid --pid )" +
                             std::to_string(w.pid()) + R"( -d 3s --broker 127.0.0.1:9090 --service image \
      >/dev/null 2>"$out/trace.err"
    echo "trace_exit=$?"
    wait $sub
    echo "subscribe_exit=$?"
    cat "$out/sub"
    echo "--- subscribe stderr"; cat "$out/sub.err"; echo "--- trace stderr"; cat "$out/trace.err"
    echo "--- broker"; cat "$out/broker"
    rm -rf "$out"
  )";
  const auto r = in_image(root(), script, 90s);
  EXPECT_NE(r.out.find("trace_exit=0"), std::string::npos) << r.out;
  ASSERT_NE(r.out.find("subscribe_exit=0"), std::string::npos) << r.out;
  std::vector<nlohmann::json> events;
  std::istringstream in(r.out.substr(0, r.out.find("--- subscribe stderr")));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{", 0) == 0) events.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(events.size(), 5u) << r.out;
  for (const auto& e : events) {
    EXPECT_EQ(e["probe"], "syscall:getppid") << e;
    EXPECT_EQ(e["pid"], w.pid()) << e;
    EXPECT_EQ(e["service"], "image") << e;
  }
}

}  // namespace
}  // namespace mcp::packaging_test
