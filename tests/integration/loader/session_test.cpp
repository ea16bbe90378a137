// BpfSession on a real kernel. Its map calls go through a MapIo that fails the calls a test
// arms (loader/map_io.h): each failure is thrown to the caller, naming the map and the probe,
// or, where the caller cannot be told, counted in map_failures(). And a probe removed in a
// DetachBatch stays attached until the batch ends.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "../../support/run_command.h"
#include "common/error.h"
#include "loader/bpf_session.h"
#include "loader/map_io.h"
#include "loader/target_resolver.h"
#include "mcp_abi.h"

namespace {

using mcp::loader::BpfSession;
using mcp::loader::MapIo;
using mcp::loader::ProbeConfig;

const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

// libbpf's calls, except the one kind of call on the one map a test arms, which fails with EIO.
class FailingMapIo : public MapIo {
 public:
  enum class Op { kUpdate, kLookup, kErase };
  void arm(Op op, const std::string& map) {
    std::lock_guard lock(mu_);
    armed_ = {op, map};
  }
  void heal() {
    std::lock_guard lock(mu_);
    armed_.reset();
  }
  // A map's descriptor, once the session has used it.
  int fd_of(const std::string& map) const {
    std::lock_guard lock(mu_);
    for (const auto& [fd, name] : names_)
      if (name == map) return fd;
    return -1;
  }
  int update(int fd, const void* key, const void* value, uint64_t flags) const override {
    return fails(Op::kUpdate, fd) ? -EIO : MapIo::update(fd, key, value, flags);
  }
  int lookup(int fd, const void* key, void* value) const override {
    return fails(Op::kLookup, fd) ? -EIO : MapIo::lookup(fd, key, value);
  }
  int erase(int fd, const void* key) const override {
    return fails(Op::kErase, fd) ? -EIO : MapIo::erase(fd, key);
  }

 private:
  bool fails(Op op, int fd) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(fd);
    if (it == names_.end()) {
      bpf_map_info info{};
      uint32_t len = sizeof(info);
      it = names_.emplace(fd, bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.name : "").first;
    }
    if (!armed_ || armed_->first != op || armed_->second != it->second) return false;
    errno = EIO;
    return true;
  }
  mutable std::mutex mu_;
  std::optional<std::pair<Op, std::string>> armed_;
  mutable std::map<int, std::string> names_;
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    io_ = std::make_shared<FailingMapIo>();
    mcp::loader::SessionOptions options;
    options.sampling_windows = false;
    options.map_io = io_;
    session_ = BpfSession::open(options);
  }
  uint64_t seen(uint32_t id) const { return session_->counters(id).seen; }
  // The session traces every process but its own: the calls come from a child.
  static void call_work(int n) {
    const auto r = mcp::test::run_command({kWorkload, "calls", std::to_string(n)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::shared_ptr<FailingMapIo> io_;
  std::unique_ptr<BpfSession> session_;
};

TEST_F(SessionTest, AnIdWhoseCountersCannotBeZeroedIsNotAdded) {
  io_->arm(FailingMapIo::Op::kUpdate, "counters");
  try {
    session_->add_syscall("getppid", ProbeConfig{});
    FAIL() << "the add went through with its counters not zeroed";
  } catch (const mcp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("counters of probe id 1 (map counters)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(session_->probes().empty());
  io_->heal();
  EXPECT_EQ(session_->add_syscall("getppid", ProbeConfig{}), 1u);
  EXPECT_EQ(session_->map_failures(), 0u);
}

TEST_F(SessionTest, AFailedReadOfAProbesConfigurationLeavesItWhole) {
  ProbeConfig config;
  config.threshold = 1234;
  config.trace_id_arg = 1;
  const uint32_t id = session_->add_syscall("getppid", config);
  io_->arm(FailingMapIo::Op::kLookup, "probe_configs");
  try {
    session_->set_threshold(id, 99);
    FAIL() << "set_threshold went on without the probe's configuration";
  } catch (const mcp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("probe " + std::to_string(id) + "'s configuration (map probe_configs)"),
              std::string::npos)
        << e.what();
  }
  io_->heal();
  mcp_probe_config value{};
  ASSERT_EQ(bpf_map_lookup_elem(io_->fd_of("probe_configs"), &id, &value), 0);
  EXPECT_EQ(value.threshold, 1234u);
  EXPECT_EQ(value.trace_id_arg, 2);  // argument 1, stored 1-based
}

TEST_F(SessionTest, ARemovedGroupMemberThatCannotBeSilencedIsCounted) {
  ProbeConfig config;
  if (!session_->can_group(config, false)) GTEST_SKIP() << "no uprobe_multi links in this kernel";
  const auto ids = session_->add_uprobe_group(
      {mcp::loader::resolve_uprobe(kWorkload + ":mcp_work", 0), mcp::loader::resolve_uprobe(kWorkload + ":mcp_sleep", 0)},
      false, -1, {config, config});
  ASSERT_EQ(ids.size(), 2u);
  io_->arm(FailingMapIo::Op::kUpdate, "probe_configs");
  session_->remove_probe(ids[0]);  // cannot throw: Attachment's destructor calls it
  EXPECT_EQ(session_->map_failures(), 1u);
  EXPECT_FALSE(session_->probe(ids[0]));
  io_->heal();
  session_->remove_probe(ids[1]);
  EXPECT_EQ(session_->map_failures(), 1u);
}

TEST_F(SessionTest, FailuresNoCallerCanBeToldOfAreCounted) {
  const uint32_t id = session_->add_syscall("getppid", ProbeConfig{});
  session_->erase_scope(id, 12345);  // never there: ENOENT is no failure
  EXPECT_EQ(session_->map_failures(), 0u);
  io_->arm(FailingMapIo::Op::kErase, "scope_cgroups");
  session_->erase_scope(id, 12345);
  EXPECT_EQ(session_->map_failures(), 1u);
  io_->arm(FailingMapIo::Op::kUpdate, "prefix_counters");
  session_->clear_prefix_counters(1);
  EXPECT_EQ(session_->map_failures(), 2u);
  io_->arm(FailingMapIo::Op::kLookup, "probe_configs");
  session_->threshold(id);
  EXPECT_EQ(session_->map_failures(), 3u);
  io_->arm(FailingMapIo::Op::kLookup, "counters");
  session_->counters(id);
  EXPECT_EQ(session_->map_failures(), 4u);
}

TEST_F(SessionTest, AProbeRemovedInABatchStaysAttachedUntilTheBatchEnds) {
  const uint32_t id = session_->add_uprobe(mcp::loader::resolve_uprobe(kWorkload + ":mcp_work", 0), false, -1,
                                           ProbeConfig{});
  uint64_t at_end;
  {
    BpfSession::DetachBatch batch(*session_);
    session_->remove_probe(id);
    EXPECT_FALSE(session_->probe(id));
    const uint64_t before = seen(id);
    call_work(50);
    EXPECT_GE(seen(id) - before, 50u) << "detached before the batch closed its links";
    at_end = seen(id);
  }
  call_work(50);
  EXPECT_EQ(seen(id), at_end) << "still attached after the batch";
}

}  // namespace
