// The enrichment chain and each stage against the real libraries they wrap: pod identity on a
// directory tree standing for the cgroup2 mount and /proc, the kernel symboliser, the clock,
// and pod names from the fake API server over TLS.
#include "enrich/enrich_chain.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "clock/timestamper.h"
#include "cuda/kernel_symbolizer.h"
#include "enrich/stages.h"
#include "../../support/fake_apiserver.h"
#include "../../support/files.h"

namespace mcp::enrich {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Records its name and drops events whose pid is `drop_pid`.
class Recorder final : public Enricher {
 public:
  Recorder(std::string name, std::vector<std::string>& log, uint32_t drop_pid = 0)
      : name_(std::move(name)), log_(log), drop_pid_(drop_pid) {}
  bool enrich(Event& e) override {
    log_.push_back(name_);
    return e.pid != drop_pid_;
  }
  std::string_view name() const override { return name_; }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  uint32_t drop_pid_;
};

class FixedLabels final : public ProbeLabels {
 public:
  std::map<uint32_t, std::shared_ptr<const ProbeMeta>> by_id;
  std::shared_ptr<const ProbeMeta> meta(uint32_t id) const override {
    const auto it = by_id.find(id);
    return it == by_id.end() ? nullptr : it->second;
  }
};

TEST(EnrichChain, RunsStagesInOrderAndNothingAfterADrop) {
  std::vector<std::string> log;
  EnrichChain chain;
  chain.add(std::make_unique<Recorder>("a", log));
  chain.add(std::make_unique<Recorder>("b", log, 7));
  chain.add(std::make_unique<Recorder>("c", log));
  EXPECT_EQ(chain.names(), (std::vector<std::string_view>{"a", "b", "c"}));
  Event kept;
  kept.pid = 1;
  EXPECT_TRUE(chain.enrich(kept));
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "c"}));
  log.clear();
  Event dropped;
  dropped.pid = 7;
  EXPECT_FALSE(chain.enrich(dropped));
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
}

TEST(ProbeLabelStage, ServiceAndTagsForEveryKindTheApiNameForCudaOnly) {
  FixedLabels labels;
  labels.by_id[1] = std::make_shared<ProbeMeta>(ProbeMeta{"checkout", {{"zone", "a"}}, "cudaLaunchKernel"});
  labels.by_id[2] = std::make_shared<ProbeMeta>(ProbeMeta{"", {}, ""});
  ProbeLabelStage stage(labels);
  Event u;
  u.probe_id = 1;
  u.kind = EventKind::kUprobe;
  ASSERT_TRUE(stage.enrich(u));
  EXPECT_EQ(u.service, "checkout");
  EXPECT_EQ(u.tags, (std::vector<std::pair<std::string, std::string>>{{"zone", "a"}}));
  EXPECT_EQ(u.cuda.api, "");
  Event c;
  c.probe_id = 1;
  c.kind = EventKind::kCuda;
  ASSERT_TRUE(stage.enrich(c));
  EXPECT_EQ(c.cuda.api, "cudaLaunchKernel");
  // Empty labels and unknown probes leave what the event has.
  for (uint32_t id : {2u, 3u}) {
    Event e;
    e.probe_id = id;
    e.service = "from-rule";
    ASSERT_TRUE(stage.enrich(e));
    EXPECT_EQ(e.service, "from-rule") << id;
  }
}

TEST(CudaSymbolStage, PassesOtherKindsAndDropsTheRuntimesBookkeeping) {
  cuda::KernelSymbolizer symbolizer;
  CudaSymbolStage stage(symbolizer);
  Event syscall;
  syscall.kind = EventKind::kSyscall;
  EXPECT_TRUE(stage.enrich(syscall));
  Event call;
  call.kind = EventKind::kCuda;
  call.cuda.api = "cudaMemcpy";
  EXPECT_TRUE(stage.enrich(call));
  Event bookkeeping;
  bookkeeping.kind = EventKind::kCuda;
  bookkeeping.cuda.internal = true;
  EXPECT_FALSE(stage.enrich(bookkeeping));
}

TEST(ClockStage, StampsWallTimeAndAnIncreasingHlc) {
  clock::Timestamper clock;
  ClockStage stage(clock);
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t ktime = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
  Event a, b;
  a.ktime_ns = b.ktime_ns = ktime;
  ASSERT_TRUE(stage.enrich(a));
  ASSERT_TRUE(stage.enrich(b));
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LT(std::llabs(static_cast<long long>(a.ts_ns) - wall), 5'000'000'000ll);
  EXPECT_GT(b.hlc, a.hlc);
}

// The whole chain in the runtime's order: pod names need the container id the identity stage
// found first, so a chain in the wrong order names nothing.
TEST(EnrichChain, PodNamesFollowTheIdentityFoundBeforeThem) {
  if (!test::FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
  const std::string uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427", id(64, 'a');
  const std::string pod_cgroup = "kubepods/burstable/pod" + uid + "/" + id;
  test::TempDir dir("mcp-enrich");
  fs::create_directories(dir.path() / "cg" / pod_cgroup);
  fs::create_directories(dir.path() / "proc/100");
  std::ofstream(dir.path() / "proc/100/cgroup") << "0::/" << pod_cgroup << "\n";
  struct stat st {};
  ASSERT_EQ(stat((dir.path() / "cg" / pod_cgroup).c_str(), &st), 0);

  test::FakeApiServer api(dir.path() / "api");
  api.put_pod(test::FakeApiServer::make_pod("shop", "web-1", uid, "node-a", {{"app", "web"}}, {{"app", id}}));
  FixedLabels labels;
  labels.by_id[1] = std::make_shared<ProbeMeta>(ProbeMeta{"checkout", {}, ""});
  clock::Timestamper clock;

  EnrichChain chain;
  chain.add(std::make_unique<PodIdentityStage>(dir.path() / "cg", dir.path() / "proc"));
  chain.add(std::make_unique<ProbeLabelStage>(labels));
  chain.add(std::make_unique<ClockStage>(clock));
  auto names = std::make_unique<PodNamesStage>(k8s::PodNamesSpec{{api.url(), api.token_file(), api.ca_file()}, "node-a", {"app"}});
  names->names().start();
  ASSERT_TRUE(names->names().wait_synced(10s)) << names->names().unavailable();
  chain.add(std::move(names));

  Event e;
  e.pid = 100;
  e.probe_id = 1;
  e.cgroup_id = st.st_ino;
  e.ktime_ns = 1;
  ASSERT_TRUE(chain.enrich(e));
  EXPECT_EQ(e.container_id, id);
  EXPECT_EQ(e.pod_uid, uid);
  EXPECT_EQ(e.service, "checkout");
  EXPECT_NE(e.hlc, 0u);
  EXPECT_EQ(e.pod, "web-1");
  EXPECT_EQ(e.pod_namespace, "shop");
  EXPECT_EQ(e.container, "app");
  EXPECT_EQ(e.pod_labels, (std::vector<std::pair<std::string, std::string>>{{"app", "web"}}));
}

}  // namespace
}  // namespace mcp::enrich
