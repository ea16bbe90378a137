// Runtime tier for CUDA (issue 3): the real agent traces the fixture built with
// the real CUDA toolkit. No GPU is present, so every call fails with a driver
// error (reported in ret) but the probes fire all the same.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <tuple>

#include "../../support/bpf_stats.h"
#include "../../support/files.h"
#include "../../support/process.h"
#include "../../support/run_command.h"
#include "../../support/wait_until.h"

namespace {

using mcp::test::parse_json_lines;
using mcp::test::run_command;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";

std::string fixture(const std::string& variant) {
  return std::string(MCP_TEST_DIR) + "/cuda_launch_" + variant;
}

// Events go to a file of their own: the fixture prints on stdout too, and two writers of
// one file (`--output /dev/stdout` reopens it at offset 0) overwrite each other's bytes.
struct EventFile {
  std::string path;
  EventFile() {
    char tmpl[] = "/tmp/mcp-cuda-events-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd);
    path = tmpl;
  }
  ~EventFile() { unlink(path.c_str()); }
  std::vector<nlohmann::json> events() const { return parse_json_lines(mcp::test::slurp(path)); }
};

#define MCP_REQUIRE_FIXTURE(path)                                                            \
  do {                                                                                      \
    struct stat st;                                                                         \
    if (stat((path).c_str(), &st) != 0) GTEST_SKIP() << "CUDA toolkit (nvcc) not installed"; \
  } while (0)

class CudaLaunch : public ::testing::TestWithParam<std::string> {};

// --cuda-latency: every launch is timed entry to return, so it carries the driver's error
// and its API latency.
TEST_P(CudaLaunch, FiveNamedLaunchesWithTheirGeometryAndDriverError) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--cuda-latency", "--output", out.path, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> launches, mallocs;
  for (const auto& line : out.events()) {
    ASSERT_EQ(line["kind"], "cuda");
    if (line["cuda"].contains("kernel")) launches.push_back(line);
    if (line["cuda"]["api"] == "cudaMalloc") mallocs.push_back(line);
  }
  ASSERT_EQ(launches.size(), 5u) << r.out << r.err;
  for (const auto& e : launches) {
    EXPECT_EQ(e["cuda"]["api"], "cudaLaunchKernel");
    EXPECT_EQ(e["cuda"]["kernel"], "vecAdd(float*, int)");
    EXPECT_EQ(e["cuda"]["grid"], nlohmann::json({4, 2, 1}));
    EXPECT_EQ(e["cuda"]["block"], nlohmann::json({64, 1, 1}));
    EXPECT_EQ(e["cuda"]["shared_mem"], 0);
    EXPECT_NE(e["ret"], 0) << "no GPU: the launch must report the driver error";
    EXPECT_GT(e["duration_ns"].get<uint64_t>(), 0u);
    EXPECT_FALSE(e["cuda"].contains("slow_mode")) << "slow-launch detection is off by default";
    EXPECT_EQ(e["comm"], ("cuda_launch_" + GetParam()).substr(0, 15));  // comm holds 15 bytes
  }
  ASSERT_EQ(mallocs.size(), 1u);
  EXPECT_EQ(mallocs[0]["cuda"]["bytes"], 1024);
  EXPECT_NE(r.err.find("vecAdd(float*, int)"), std::string::npos) << "per-kernel summary: " << r.err;
}

// The default: a launch is reported at its entry, named and with its geometry, but with no
// return value and no duration (the JSON leaves both out); other APIs are still timed.
TEST_P(CudaLaunch, ByDefaultLaunchesAreReportedAtEntryWithoutRetOrDuration) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--output", out.path, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int launches = 0, mallocs = 0;
  for (const auto& e : out.events()) {
    if (e["cuda"]["api"] == "cudaMalloc") {
      mallocs++;
      EXPECT_TRUE(e.contains("duration_ns") && e.contains("ret")) << e.dump();
      continue;
    }
    if (!e["cuda"].contains("kernel")) continue;
    launches++;
    EXPECT_EQ(e["cuda"]["kernel"], "vecAdd(float*, int)") << e.dump();
    EXPECT_EQ(e["cuda"]["grid"], nlohmann::json({4, 2, 1})) << e.dump();
    EXPECT_EQ(e["cuda"]["block"], nlohmann::json({64, 1, 1})) << e.dump();
    EXPECT_FALSE(e.contains("duration_ns")) << e.dump();
    EXPECT_FALSE(e.contains("ret")) << e.dump();
  }
  EXPECT_EQ(launches, 5) << r.err;
  EXPECT_EQ(mallocs, 1) << r.err;
}

// Runs of the CUDA programs (entry, return, session), summed: the traps the traced calls took.
uint64_t cuda_program_runs(const std::string& err) {
  uint64_t n = 0;
  for (const auto& [name, runs] : mcp::test::program_runs(err))
    if (name.rfind("mcp_cuda_", 0) == 0) n += runs;
  return n;
}

struct CudaRun {
  uint64_t runs = 0;            // CUDA program runs
  uint64_t launch_seen = 0;     // SEEN summed over the launch API probes
  uint64_t launch_kept = 0;
  int launch_probes_seen = 0;   // launch API probes that saw any call
  std::string err;
};

CudaRun trace_launches(const std::string& bin, int launches, const std::vector<std::string>& flags,
                       const std::string& path = "chevrons") {
  std::vector<std::string> argv{kAgent, "trace", "--cuda", "--output", "/dev/null"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const auto& a : {std::string("--"), bin, std::to_string(launches), path}) argv.push_back(a);
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CudaRun out;
  out.err = r.err;
  out.runs = cuda_program_runs(r.err);
  for (const auto& [probe, row] : mcp::test::parse_summary(r.err)) {
    if (probe.find("LaunchKernel") == std::string::npos && probe.find("GraphLaunch") == std::string::npos) continue;
    out.launch_seen += row.seen;
    out.launch_kept += row.kept;
    out.launch_probes_seen += row.seen > 0;
  }
  return out;
}

// Issue 18: a <<<>>> launch enters __cudaLaunchKernel, which in CUDA 13 only jumps into
// cudaLaunchKernel; probing both cost four traps a launch, and timing it two. By default a
// launch is one entry program, kept or not: twenty more launches cost exactly twenty more
// CUDA program runs, at rate 1 (all kept) and at 1e-6, on any kernel (no return probe).
TEST_P(CudaLaunch, OneChevronLaunchRunsOneProbeProgram) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  mcp::test::BpfStats stats;
  if (!stats.enabled()) GTEST_SKIP() << "BPF_ENABLE_STATS refused";
  for (const char* rate : {"1", "0.000001"}) {
    // --no-windows: every launch traps, as this counts (sampling windows: windows_test.cpp)
    const std::vector<std::string> flags{"--sample-rate", rate, "--no-windows"};
    const auto few = trace_launches(bin, 1, flags), many = trace_launches(bin, 21, flags);
    EXPECT_EQ(many.launch_seen - few.launch_seen, 20u) << many.err;
    EXPECT_EQ(many.launch_probes_seen, 1) << "one launch probe per <<<>>>:\n" << many.err;
    if (std::string(rate) == "1") EXPECT_EQ(many.launch_kept - few.launch_kept, 20u) << many.err;
    EXPECT_EQ(many.runs - few.runs, 20u) << "rate " << rate << ":\n" << few.err << many.err;
  }
}

// --cuda-latency: a kept launch is timed, one entry and one return, never more.
TEST_P(CudaLaunch, ATimedLaunchRunsOneEntryAndOneReturn) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  mcp::test::BpfStats stats;
  if (!stats.enabled()) GTEST_SKIP() << "BPF_ENABLE_STATS refused";
  const auto few = trace_launches(bin, 1, {"--cuda-latency"}), many = trace_launches(bin, 21, {"--cuda-latency"});
  EXPECT_EQ(many.launch_kept - few.launch_kept, 20u) << many.err;
  EXPECT_EQ(many.runs - few.runs, 40u) << few.err << many.err;
}

// --cuda-latency with uprobe sessions: a sampled-out launch takes no return trap.
TEST_P(CudaLaunch, ASampledOutTimedLaunchRunsOneProbeProgramWithSessions) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture(GetParam());
  MCP_REQUIRE_FIXTURE(bin);
  mcp::test::BpfStats stats;
  if (!stats.enabled()) GTEST_SKIP() << "BPF_ENABLE_STATS refused";
  const std::vector<std::string> flags{"--cuda-latency", "--sample-rate", "0.000001"};
  const auto few = trace_launches(bin, 1, flags), many = trace_launches(bin, 21, flags);
  if (many.err.find("uprobe returns: session") == std::string::npos)
    GTEST_SKIP() << "no uprobe sessions on this kernel: every call also runs its uretprobe\n" << many.err;
  // a kept launch (p = 1e-6) would add its return run
  EXPECT_EQ(many.runs - few.runs, 20u + (many.launch_kept - few.launch_kept)) << few.err << many.err;
}

INSTANTIATE_TEST_SUITE_P(Runtimes, CudaLaunch, ::testing::Values("shared", "static"));

// The other launch APIs: a host-function cudaLaunchKernel, cudaLaunchKernelExC and
// cudaGraphLaunch are each reported once per call, kernels named where the call names one.
class CudaLaunchPath : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLaunchPath, EachCallIsOneLaunchEvent) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture("shared");
  MCP_REQUIRE_FIXTURE(bin);
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--output", out.path, "--", bin, "3", GetParam()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string api = GetParam() == "exc" ? "cudaLaunchKernelExC" : GetParam() == "graph" ? "cudaGraphLaunch"
                                                                                              : "cudaLaunchKernel";
  int calls = 0;
  for (const auto& e : out.events()) {
    if (e["cuda"]["api"] != api) continue;
    calls++;
    if (GetParam() != "graph") {
      EXPECT_EQ(e["cuda"]["kernel"], "vecAdd(float*, int)") << e.dump();
      EXPECT_EQ(e["cuda"]["grid"], nlohmann::json({4, 2, 1})) << e.dump();
    }
  }
  EXPECT_EQ(calls, 3) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Apis, CudaLaunchPath, ::testing::Values("direct", "exc", "graph"));

TEST(CudaSlowLaunch, SlowLaunchesSwitchTheProcessToRateOneWithUserStacks) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture("shared");
  MCP_REQUIRE_FIXTURE(bin);
  // Every launch is "slow" at 1 ns; the base rate is tiny, so only slow mode keeps launches 2..5.
  const EventFile out;
  auto r = run_command(
      {kAgent, "trace", "--cuda", "--slow-launch", "1ns", "--sample-rate", "0.000001", "--output", out.path, "--", bin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int slow = 0;
  for (const auto& e : out.events()) {
    if (!e["cuda"].contains("kernel")) continue;
    EXPECT_TRUE(e["cuda"].value("slow_mode", false));
    EXPECT_FALSE(e["cuda"]["user_stack"].empty());
    EXPECT_TRUE(e.contains("duration_ns")) << "--slow-launch times every launch: " << e.dump();
    EXPECT_EQ(e["weight"], 1.0);
    slow++;
  }
  // The first launch is sampled out at 1e-6 but timed; being slow it is kept and
  // switches the process to slow mode, so all five are kept.
  EXPECT_EQ(slow, 5);
}

// A launch timed only for slow detection locates its host function at return (the entry
// skips bpf_find_vma): launches by host function pointer must still be named, with their
// geometry. With uprobe sessions such a launch leaves no cuda_entries entry (its start is in
// the session cookie, its registers in task storage), so the first, sampled-out launch
// that turns out slow is rebuilt from those; the fallback keeps the whole entry. Both
// modes, and a launch API whose geometry is read through a pointer (cudaLaunchKernelExC).
class CudaSlowNamed : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaSlowNamed, ASampledOutLaunchThatTurnsOutSlowIsStillNamed) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture("shared");
  MCP_REQUIRE_FIXTURE(bin);
  const auto& [mode, path] = GetParam();
  const EventFile out;
  auto r = run_command({"/usr/bin/env", "MCP_UPROBE_SESSION=" + mode, kAgent, "trace", "--cuda", "--slow-launch", "1ns",
                        "--sample-rate", "0.000001", "--output", out.path, "--", bin, "3", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(mode == "off" ? "uprobe returns: uretprobe" : "uprobe returns: session"), std::string::npos)
      << r.err;
  int named = 0;
  for (const auto& e : out.events()) {
    if (!e["cuda"].contains("grid")) continue;
    named += e["cuda"]["kernel"] == "vecAdd(float*, int)";
    EXPECT_EQ(e["cuda"]["grid"], nlohmann::json({4, 2, 1})) << e.dump();
  }
  EXPECT_EQ(named, 3) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaSlowNamed,
                         ::testing::Combine(::testing::Values("on", "off"), ::testing::Values("direct", "exc")));

// Issue 18, names for every launch path. The driver API and the runtime's graph calls run
// against stand-ins (tests/fixtures/fake_cuda: no GPU, no real driver here) with the real
// signatures; the agent's real probes attach to them by --cuda-lib, so nothing here needs nvcc.
const std::string kDriverProgram = std::string(MCP_TEST_DIR) + "/cuda_driver_launch";
const std::string kFakeDir = std::string(MCP_TEST_DIR) + "/fake_cuda";

std::vector<std::string> trace_stand_ins(const std::vector<std::string>& flags, const std::string& mode, int n) {
  std::vector<std::string> argv{kAgent, "trace", "--cuda-lib", kFakeDir + "/libcuda.so.1", "--cuda-lib",
                                kFakeDir + "/libcudart.so.13"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const auto& a : {std::string("--"), kDriverProgram, mode, std::to_string(n)}) argv.push_back(a);
  return argv;
}

// Only the calls an application makes are shown: no bookkeeping record escapes.
void expect_no_bookkeeping(const std::vector<nlohmann::json>& events) {
  for (const auto& e : events) {
    const std::string api = e["cuda"]["api"];
    EXPECT_TRUE(api.find("LaunchKernel") != std::string::npos || api.find("GraphLaunch") != std::string::npos)
        << e.dump();
  }
}

// Both return modes: the name is copied by the return half, a session's or a uretprobe's.
class CudaDriver : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaDriver, ModuleFunctionLaunchesAreNamedByTheNameTheyWereLookedUpBy) {
  MCP_REQUIRE_BPF();
  const EventFile out;
  auto argv = trace_stand_ins({"--output", out.path}, "module", 4);
  argv.insert(argv.begin(), {"/usr/bin/env", "MCP_UPROBE_SESSION=" + GetParam()});
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(GetParam() == "off" ? "uprobe returns: uretprobe" : "uprobe returns: session"),
            std::string::npos) << r.err;
  const auto events = out.events();
  expect_no_bookkeeping(events);
  int vec_add = 0, saxpy = 0, long_named = 0;
  for (const auto& e : events) {
    const auto& c = e["cuda"];
    if (c["api"] == "cuLaunchKernel" && c["kernel"] == "vecAdd(float*, int)") {
      vec_add++;
      EXPECT_EQ(c["grid"], nlohmann::json({4, 2, 1})) << e.dump();
      EXPECT_EQ(c["block"], nlohmann::json({64, 1, 1})) << e.dump();
      EXPECT_EQ(c["shared_mem"], 128) << e.dump();
    } else if (c["api"] == "cuLaunchKernelEx" && c["kernel"] == "saxpy") {
      saxpy++;
      EXPECT_EQ(c["grid"], nlohmann::json({8, 1, 1})) << e.dump();
      EXPECT_EQ(c["block"], nlohmann::json({32, 1, 1})) << e.dump();
      EXPECT_EQ(c["shared_mem"], 256) << e.dump();
    } else if (c["api"] == "cuLaunchKernel" && c["kernel"] == std::string(255, 'k') + "...") {
      long_named++;  // names are copied up to 255 bytes, the cut is shown
    } else {
      ADD_FAILURE() << "unexpected: " << e.dump();
    }
  }
  EXPECT_EQ(vec_add, 4) << r.err;
  EXPECT_EQ(saxpy, 1) << r.err;
  EXPECT_EQ(long_named, 1) << r.err;
}

// A CUkernel is launched as itself (CUDA 12+ allows it as a CUfunction) or through the
// CUfunction cuKernelGetFunction gives for it: both carry the name the library lookup used.
INSTANTIATE_TEST_SUITE_P(Modes, CudaDriver, ::testing::Values("on", "off"));

TEST(CudaDriverLibrary, KernelsAreNamedLaunchedDirectlyOrThroughTheirFunction) {
  MCP_REQUIRE_BPF();
  const EventFile out;
  auto r = run_command(trace_stand_ins({"--output", out.path}, "library", 3));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto events = out.events();
  expect_no_bookkeeping(events);
  std::map<std::string, int> kernels;
  for (const auto& e : events) kernels[e["cuda"].value("kernel", "(none)")]++;
  EXPECT_EQ(kernels, (std::map<std::string, int>{{"vecAdd(float*, int)", 3}, {"saxpy", 1}})) << r.err;
}

// The hot path stays one trap: a driver launch, kept, runs its entry program only (the
// name lookup is in userspace, from bookkeeping done once per function).
TEST(CudaDriverCost, ADriverLaunchRunsOneProbeProgram) {
  MCP_REQUIRE_BPF();
  mcp::test::BpfStats stats;
  if (!stats.enabled()) GTEST_SKIP() << "BPF_ENABLE_STATS refused";
  auto runs = [](int n) {
    auto r = run_command(trace_stand_ins({"--output", "/dev/null"}, "module", n));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    uint64_t kept = 0;
    for (const auto& [probe, row] : mcp::test::parse_summary(r.err))
      if (probe.find("LaunchKernel") != std::string::npos) kept += row.kept;
    return std::make_tuple(cuda_program_runs(r.err), kept, r.err);
  };
  const auto [few, few_kept, few_err] = runs(1);
  const auto [many, many_kept, many_err] = runs(21);
  EXPECT_EQ(many_kept - few_kept, 20u) << many_err;
  EXPECT_EQ(many - few, 20u) << few_err << many_err;
}

// cudaGraphLaunch names its graph and the kernel nodes the graph had when instantiated;
// a destroyed graph's handle, reused by a new graph, starts its count over; a captured
// graph's count is not known (its launches are sampled), so it is left out.
TEST(CudaGraph, GraphLaunchesReportTheGraphAndItsKernelNodeCount) {
  MCP_REQUIRE_BPF();
  const EventFile out;
  auto r = run_command(trace_stand_ins({"--output", out.path}, "graph", 3));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("graph ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const uint64_t reused = std::stoull(r.out.substr(at + 6));
  const auto events = out.events();
  expect_no_bookkeeping(events);
  int three = 0, one = 0, captured = 0;
  for (const auto& e : events) {
    const auto& c = e["cuda"];
    ASSERT_EQ(c["api"], "cudaGraphLaunch") << e.dump();
    ASSERT_TRUE(c.contains("graph")) << e.dump();
    if (!c.contains("graph_kernel_nodes")) {
      captured++;
      EXPECT_NE(c["graph"].get<uint64_t>(), reused) << e.dump();
      continue;
    }
    EXPECT_EQ(c["graph"].get<uint64_t>(), reused) << e.dump();
    three += c["graph_kernel_nodes"] == 3;
    one += c["graph_kernel_nodes"] == 1;
  }
  EXPECT_EQ(three, 3) << r.err;
  EXPECT_EQ(one, 1) << r.err;
  EXPECT_EQ(captured, 1) << r.err;
}

}  // namespace

// Issue 33: CUDA where AI workloads run. A PyTorch-like process loads the runtime with
// dlopen() from a pip wheel's folder after it started, and the runtime loads the driver
// from there; nothing the executable links names CUDA, and no --cuda-lib is given.
namespace discovery {

namespace fs = std::filesystem;

const std::string kDlopenProgram = std::string(MCP_TEST_DIR) + "/fake_cuda_dlopen";
const std::string kStaticProgram = std::string(MCP_TEST_DIR) + "/fake_cuda_static";

// The stand-in runtime and driver copied into site-packages/nvidia/cu13/lib of a new folder:
// new files (inodes) no other probe or test has attached.
struct Wheel {
  mcp::test::TempDir root{"mcp-wheel"};
  fs::path lib = root.path() / "site-packages" / "nvidia" / "cu13" / "lib";
  Wheel() {
    fs::create_directories(lib);
    for (const char* f : {"libcudart.so.13", "libcuda.so.1"}) fs::copy_file(kFakeDir + "/" + f, lib / f);
  }
};

struct Counts {
  std::map<std::string, int> launches;  // "api kernel" -> events with cuda.launch
  std::map<std::string, int> calls;     // api -> events without
  double weight = 0;                    // of the launches
};

Counts count(const std::vector<nlohmann::json>& events, int pid = 0) {
  Counts c;
  for (const auto& e : events) {
    if (e["kind"] != "cuda" || (pid && e["pid"] != pid)) continue;
    const auto& cu = e["cuda"];
    EXPECT_TRUE(cu.contains("launch")) << e.dump();
    if (cu.value("launch", false)) {
      c.launches[cu["api"].get<std::string>() + " " + cu.value("kernel", "")]++;
      c.weight += e["weight"].get<double>();
    } else {
      c.calls[cu["api"].get<std::string>()]++;
    }
  }
  return c;
}

TEST(CudaDiscovery, ARuntimeDlopenedFromAWheelIsFoundAndEachLaunchCountedOnce) {
  MCP_REQUIRE_BPF();
  const Wheel wheel;
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--output", out.path, "--", kDlopenProgram, wheel.lib.string(),
                        "7", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_NE(r.out.find("traced"), std::string::npos) << "the probes never reached the process: " << r.out << r.err;
  ASSERT_EQ(r.out.find("untraced"), std::string::npos) << r.out << r.err;
  const Counts c = count(out.events());
  // The runtime's launches enter the driver's cuLaunchKernel: that call is not a second launch.
  EXPECT_EQ(c.launches, (std::map<std::string, int>{{"cudaLaunchKernel fake_softmax_stub", 7},
                                                    {"cuLaunchKernelEx nvjet_fake", 5}}))
      << r.err;
  EXPECT_DOUBLE_EQ(c.weight, 12.0);
  EXPECT_EQ(c.calls, (std::map<std::string, int>{{"cudaMalloc", 1}, {"cudaDeviceSynchronize", 1}, {"cudaFree", 1}}))
      << r.err;
  // Where each library was found, and how long after its mapping it was traced.
  for (const char* f : {"libcudart.so.13", "libcuda.so.1"})
    EXPECT_NE(r.err.find("cuda library: " + (wheel.lib / f).string() + " (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after it was mapped"), std::string::npos) << "the watch found it: " << r.err;
  EXPECT_NE(r.err.find("EST_LAUNCHES"), std::string::npos) << r.err;
}

// Issue 51, finding 9: a file named like a CUDA library that has no CUDA API function (here
// libm under the name libcuda.so.1, loaded by python's ctypes) is found by the watch and said
// to be untraced, not "traced N ms after it was mapped".
TEST(CudaDiscovery, AFileNamedLikeCudaWithoutItsApiIsSaidToBeUntraced) {
  MCP_REQUIRE_BPF();
  const std::string python = "/usr/bin/python3";
  const std::string libm = "/lib/x86_64-linux-gnu/libm.so.6";
  if (!std::filesystem::exists(python) || !std::filesystem::exists(libm))
    GTEST_SKIP() << "needs " << python << " and " << libm;
  mcp::test::TempDir dir{"mcp-not-cuda"};
  const auto fake = dir.path() / "libcuda.so.1";
  std::filesystem::copy_file(libm, fake);
  auto r = run_command({kAgent, "trace", "--cuda", "--output", "/dev/null", "--", python, "-c",
                        // alive a while after loading it: the agent reads its maps to name the file
                        "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); time.sleep(3)", fake.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cuda library: " + fake.string() + " (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not traced: no CUDA API function in it"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("after it was mapped"), std::string::npos) << r.err;
}

// The same process at rate 0.5: a nested driver call is skipped before the draw, so kept
// launches still carry weight 2 and never a driver-level duplicate.
TEST(CudaDiscovery, SampledLaunchesKeepExactWeightsAndNoDriverDuplicates) {
  MCP_REQUIRE_BPF();
  const Wheel wheel;
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "-r", "0.5", "--output", out.path, "--", kDlopenProgram,
                        wheel.lib.string(), "400", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Counts c = count(out.events());
  int kept = 0;
  for (const auto& [key, n] : c.launches) {
    EXPECT_EQ(key, "cudaLaunchKernel fake_softmax_stub") << r.err;
    kept += n;
  }
  EXPECT_DOUBLE_EQ(c.weight, 2.0 * kept);
  // 400 draws at p = 0.5: 200 +- 50 is over 5 standard deviations.
  EXPECT_GT(kept, 150) << r.err;
  EXPECT_LT(kept, 250) << r.err;
  for (const auto& [probe, row] : mcp::test::parse_summary(r.err))
    if (probe.ends_with(":cuLaunchKernel")) EXPECT_EQ(row.seen, 0u) << "nested calls are not even seen: " << r.err;
}

// An executable holding its own runtime (nvcc's static default) that also calls the driver:
// only the driver calls its runtime makes are nested, its own direct ones are launches.
TEST(CudaDiscovery, AStaticRuntimeAndDirectDriverCallsInOneFileCountEachOnce) {
  MCP_REQUIRE_BPF();
  const EventFile out;
  auto r = run_command({kAgent, "trace", "--cuda", "--output", out.path, "--", kStaticProgram, "6", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(out.events()).launches,
            (std::map<std::string, int>{{"cudaLaunchKernel fake_static_stub", 6},
                                        {"cuLaunchKernel direct_driver_kernel", 4}}))
      << r.err;
}

// The daemon (every process on the node): a process that starts after the agent and
// dlopen()s CUDA from a wheel is traced from the default configuration.
TEST(CudaDiscovery, TheDaemonFindsALibraryAProcessStartedLaterLoads) {
  MCP_REQUIRE_BPF();
  const Wheel wheel;
  const fs::path config = wheel.root.path() / "agent.yaml";
  std::ofstream(config) << "version: 1\nmetrics:\n  listen: 127.0.0.1:0\ncuda:\n  enabled: true\n";
  chmod(config.c_str(), 0600);
  mcp::test::Process agent({kAgent, "run", "--config", config.string()}, wheel.root.path(), "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("mcp-agent: ready: "), std::chrono::seconds(20))) << agent.err();
  auto r = run_command({kDlopenProgram, wheel.lib.string(), "3", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_NE(r.out.find("traced"), std::string::npos) << agent.err();
  ASSERT_EQ(r.out.find("untraced"), std::string::npos) << agent.err();
  const std::string kernel = "cudaLaunchKernel fake_softmax_stub", driver = "cuLaunchKernelEx nvjet_fake";
  auto ours = [&] {
    std::map<std::string, int> n;
    for (const auto& e : parse_json_lines(agent.out())) {
      if (e["kind"] != "cuda" || e["comm"] != "fake_cuda_dlope" || !e["cuda"].value("launch", false)) continue;
      n[e["cuda"]["api"].get<std::string>() + " " + e["cuda"].value("kernel", "")]++;
    }
    return n;
  };
  ASSERT_TRUE(mcp::test::wait_until([&] { return ours()[kernel] >= 3 && ours()[driver] >= 2; })) << agent.err();
  agent.signal(SIGTERM);
  EXPECT_EQ(agent.wait(std::chrono::seconds(30)).value_or(-1), 0) << agent.err();
  EXPECT_EQ(ours(), (std::map<std::string, int>{{kernel, 3}, {driver, 2}})) << agent.err();
}

}  // namespace discovery

// Issue 34: launches sample calls by default (windowed, PyTorch's launches came out low on a
// GPU); MCP_CUDA_WINDOWS=on attaches them in sampling windows, whose kept launches still weigh 1/p.
TEST(CudaWindows, LaunchesSampleCallsUnlessWindowsAreAskedFor) {
  MCP_REQUIRE_BPF();
  const std::string bin = fixture("shared");
  MCP_REQUIRE_FIXTURE(bin);
  const std::string launch_probe = "libcudart.so.13:cudaLaunchKernel ";
  for (const bool windows : {false, true}) {
    const EventFile out;
    auto r = run_command({"/usr/bin/env", std::string("MCP_CUDA_WINDOWS=") + (windows ? "on" : "off"), kAgent, "trace",
                          "--cuda", "-r", "0.05", "--output", out.path, "--", bin});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto block = r.err.find("SAMPLING WINDOWS");
    const bool listed = block != std::string::npos && r.err.find(launch_probe, block) != std::string::npos;
    EXPECT_EQ(listed, windows) << r.err;
    for (const auto& e : out.events())
      if (e["cuda"].value("launch", false)) EXPECT_DOUBLE_EQ(e["weight"].get<double>(), 20.0) << e.dump();
  }
}
