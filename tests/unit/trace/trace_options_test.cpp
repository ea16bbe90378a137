// `mcp-agent trace` flags: real argv through CLI11 (add_trace_options on a trace
// subcommand, as main() wires it), then validate(). One test per validate() rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "cli/trace_options.h"
#include "common/error.h"
#include "config/config.h"
#include "../../support/files.h"

namespace mcp::cli {
namespace {

using namespace std::chrono_literals;

// Parses `mcp-agent trace ARGS...` exactly as main() would; CLI errors propagate.
TraceOptions parse(std::initializer_list<std::string> args) {
  CLI::App app("mcp-agent");
  TraceOptions o;
  auto* sub = app.add_subcommand("trace");
  add_trace_options(*sub, o);
  std::vector<std::string> argv_s{"mcp-agent", "trace"};
  argv_s.insert(argv_s.end(), args);
  std::vector<const char*> argv;
  for (const auto& s : argv_s) argv.push_back(s.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(sub->parsed());
  return o;
}

TraceOptions parse_and_validate(std::initializer_list<std::string> args) {
  TraceOptions o = parse(args);
  validate(o);
  return o;
}

// Expects validate() to reject `args` with a one-line usage error containing `needle`.
void expect_usage_error(std::initializer_list<std::string> args, const std::string& needle) {
  TraceOptions o = parse(args);
  try {
    validate(o);
    ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(TraceOptions, DefaultsAfterValidation) {
  const auto o = parse_and_validate({"--syscall", "getppid"});
  EXPECT_EQ(o.syscalls, std::vector<std::string>{"getppid"});
  EXPECT_TRUE(o.uprobes.empty());
  EXPECT_FALSE(o.latency);
  EXPECT_EQ(o.pid, 0);
  EXPECT_EQ(o.sample_rate, 1.0);
  EXPECT_EQ(o.duration, 0ns);
  EXPECT_EQ(o.max_events, 0u);
  EXPECT_EQ(o.format, "json");
  EXPECT_EQ(o.ringbuf_bytes, 16u << 20);
  EXPECT_TRUE(o.command.empty());
  EXPECT_TRUE(o.output.empty());
}

TEST(TraceOptions, ParsesEveryFlagLongAndShort) {
  const auto o = parse_and_validate({"--uprobe", "libc:malloc", "-u", "/bin/x:ns::fn", "-s", "getppid",
                                     "--syscall", "openat", "-l", "-r", "0.25", "-d", "1500ms", "-n", "100", "-f",
                                     "table", "--ringbuf-size", "4K", "--wakeup-bytes", "8192", "-o",
                                     "/tmp/events.json", "--no-summary", "-v"});
  EXPECT_EQ(o.uprobes, (std::vector<std::string>{"libc:malloc", "/bin/x:ns::fn"}));
  EXPECT_EQ(o.syscalls, (std::vector<std::string>{"getppid", "openat"}));
  EXPECT_TRUE(o.latency);
  EXPECT_EQ(o.sample_rate, 0.25);
  EXPECT_EQ(o.duration, 1500ms);
  EXPECT_EQ(o.max_events, 100u);
  EXPECT_EQ(o.format, "table");
  EXPECT_EQ(o.ringbuf_bytes, 4096u);
  EXPECT_EQ(o.wakeup_bytes, 8192u);
  EXPECT_EQ(o.output, "/tmp/events.json");
  EXPECT_TRUE(o.quiet_summary);
  EXPECT_TRUE(o.verbose);
}

TEST(TraceOptions, CommandAfterDoubleDashIsCaptured) {
  const auto o = parse_and_validate({"-s", "getppid", "--", "/bin/sh", "x", "y"});
  EXPECT_EQ(o.command, (std::vector<std::string>{"/bin/sh", "x", "y"}));
}

TEST(TraceOptions, CommandFlagsAfterDoubleDashBelongToTheCommand) {
  // `mcp-agent trace -s getppid -- /bin/sh -c 'exit 3'`: everything after `--` is the
  // command's, even flags trace itself knows (-l, -p) or does not (-c, --color).
  const TraceOptions o = parse_and_validate({"-s", "getppid", "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(o.command, (std::vector<std::string>{"/bin/sh", "-c", "exit 3"}));
  const auto o2 = parse_and_validate({"-s", "getppid", "--", "ls", "-l", "--color", "-p", "5"});
  EXPECT_EQ(o2.command, (std::vector<std::string>{"ls", "-l", "--color", "-p", "5"}));
  EXPECT_FALSE(o2.latency);
  EXPECT_EQ(o2.pid, 0);
}

TEST(TraceOptions, NothingToTraceIsRejected) {
  expect_usage_error({}, "nothing to trace");
  expect_usage_error({"--latency", "--", "/bin/true"}, "nothing to trace");
}

TEST(TraceOptions, SampleRateMustBeInZeroOne) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "-r", "1"}).sample_rate, 1.0);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "-r", "1e-6"}).sample_rate, 1e-6);
  expect_usage_error({"-s", "getppid", "-r", "0"}, "--sample-rate");
  expect_usage_error({"-s", "getppid", "--sample-rate=-0.5"}, "--sample-rate");
  expect_usage_error({"-s", "getppid", "-r", "1.0001"}, "--sample-rate");
  TraceOptions o;
  o.syscalls = {"getppid"};
  o.sample_rate = std::nan("");
  EXPECT_THROW(validate(o), Error);
}

TEST(TraceOptions, NonNumericValuesAreCliErrors) {
  EXPECT_THROW(parse({"-s", "getppid", "-r", "half"}), CLI::ParseError);
  EXPECT_THROW(parse({"-s", "getppid", "-p", "abc"}), CLI::ParseError);
  EXPECT_THROW(parse({"-s", "getppid", "-n", "ten"}), CLI::ParseError);
  EXPECT_THROW(parse({"-s", "getppid", "--bogus-flag"}), CLI::ParseError);
}

TEST(TraceOptions, FormatMustBeJsonOrTable) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--format", "table"}).format, "table");
  expect_usage_error({"-s", "getppid", "--format", "xml"}, "xml");
}

TEST(TraceOptions, DurationIsParsedAndMustBePositive) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--duration", "10s"}).duration, 10s);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--duration", "2m"}).duration, 2min);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--duration", "3"}).duration, 3s);
  expect_usage_error({"-s", "getppid", "--duration", "10parsecs"}, "10parsecs");
  expect_usage_error({"-s", "getppid", "--duration", "soon"}, "soon");
  expect_usage_error({"-s", "getppid", "--duration", "0s"}, "--duration");
}

TEST(TraceOptions, BatchGapIsADurationUpToOneSecond) {
  EXPECT_FALSE(parse_and_validate({"-s", "getppid"}).batch_gap.has_value()) << "absent: the default";
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--batch-gap", "5ms"}).batch_gap, 5ms);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--batch-gap", "0"}).batch_gap, 0ms);
  expect_usage_error({"-s", "getppid", "--batch-gap", "2s"}, "--batch-gap: duration '2s' is above the limit of 1s");
  expect_usage_error({"-s", "getppid", "--batch-gap", "soon"}, "soon");
}

TEST(TraceOptions, NegativePidIsRejected) {
  expect_usage_error({"-s", "getppid", "--pid=-5"}, "--pid");
}

// Issue 29: each of these was accepted and then traced something else than asked (pid 0: every
// process; a rate that rounds to no threshold: nothing; NaN QPS: no steering; 4G: a 32-bit
// map size of 0).
TEST(TraceOptions, NumbersThatCannotMeanWhatTheySayAreRejected) {
  expect_usage_error({"-s", "getppid", "--pid", "0"}, "--pid must be a positive process id");
  expect_usage_error({"-s", "getppid", "-r", "5e-324"}, "--sample-rate must be in [1e-6, 1], got 4.94066e-324");
  expect_usage_error({"-s", "getppid", "-r", "nan"}, "--sample-rate must be in [1e-6, 1]");
  expect_usage_error({"-s", "getppid", "--target-qps", "nan"}, "--target-qps must be in [0.01, 1e7] events/s, got nan");
  expect_usage_error({"-s", "getppid", "--target-qps", "0"}, "--target-qps must be in");
  expect_usage_error({"-s", "getppid", "--target-qps", "inf"}, "--target-qps must be in");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "4G"}, "from 4K to 1G");
  expect_usage_error({"-s", "getppid", "--export-sample-rate", "1e-300"}, "--export-sample-rate must be in");
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "-r", "1e-6"}).sample_rate, 1e-6);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--target-qps", "0.01"}).target_qps, 0.01);
}

// Issue 51: each of these was accepted silently. -1 reached the counts as 2^64-1 (CLI11 reads
// unsigned options with strtoull); --latency did nothing on USDT probes; an agent id the
// broker refuses lost every event after 10 s of refusals; an empty prefix ruled nothing.
TEST(TraceOptions, CountsOutOfRangeNameTheFlagAndTheRange) {
  expect_usage_error({"-s", "getppid", "--max-events", "-1"}, "--max-events must be 0 (no limit) to 2^63-1, got -1");
  expect_usage_error({"-s", "getppid", "--wakeup-bytes", "-1"}, "--wakeup-bytes must be 1 to 1G (1073741824), got -1");
  expect_usage_error({"-s", "getppid", "--wakeup-bytes", "1099511627776"},
                     "--wakeup-bytes must be 1 to 1G (1073741824), got 1099511627776");
  expect_usage_error({"-s", "getppid", "--wakeup-bytes", "0"}, "--wakeup-bytes must be 1 to 1G");
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--max-events", "0"}).max_events, 0u);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--wakeup-bytes", "1073741824"}).wakeup_bytes, 1u << 30);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--wakeup-bytes", "1"}).wakeup_bytes, 1u);
}

TEST(TraceOptions, LatencyWithOnlyUsdtProbesIsRejected) {
  expect_usage_error({"--usdt", "/bin/true:prov:name", "--latency"}, "--latency applies to --uprobe and --syscall probes");
  EXPECT_TRUE(parse_and_validate({"--usdt", "/bin/true:prov:name", "-s", "getppid", "--latency"}).latency)
      << "a syscall beside it takes it";
}

TEST(TraceOptions, AnAgentIdTheBrokerWouldRefuseIsRejectedAtStart) {
  expect_usage_error({"-s", "getppid", "--agent-id", "a b|c"},
                     "--agent-id 'a b|c': agent id must be printable ASCII without spaces or '|'");
  expect_usage_error({"-s", "getppid", "--agent-id", std::string(300, 'x')}, "agent id longer than 256 bytes");
  expect_usage_error({"-s", "getppid", "--agent-id", ""}, "--agent-id '': agent id missing");
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--agent-id", "node-7.eu"}).agent_id, "node-7.eu");
}

TEST(TraceOptions, AnEmptyTraceIdPrefixIsRejected) {
  expect_usage_error({"-u", "/bin/true:main", "--trace-id-arg", "0:hex32", "--trace-id-prefix", ""},
                     "--trace-id-prefix");
  expect_usage_error({"-u", "/bin/true:main", "--trace-id-arg", "0:hex32", "--trace-id-prefix", "=0.5"},
                     "1 to 32 hex digits");
  const auto o = parse_and_validate({"-u", "/bin/true:main", "--trace-id-arg", "0:hex32", "--trace-id-prefix", "00AF=0.5"});
  ASSERT_EQ(o.trace_id_prefixes.size(), 1u);
  EXPECT_EQ(o.trace_id_prefixes[0].first, "00af");
}

TEST(TraceOptions, PidAndCommandExcludeEachOther) {
  expect_usage_error({"-s", "getppid", "-p", std::to_string(getpid()), "--", "/bin/true"}, "exclude");
}

TEST(TraceOptions, PidMustExist) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "-p", std::to_string(getpid())}).pid, getpid());
  // Above PID_MAX_LIMIT (2^22): no process can have it.
  expect_usage_error({"-s", "getppid", "-p", "99999999"}, "99999999");
}

TEST(TraceOptions, RingbufSizesWithSuffixes) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--ringbuf-size", "4K"}).ringbuf_bytes, 4096u);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--ringbuf-size", "16M"}).ringbuf_bytes, 16u << 20);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--ringbuf-size", "1G"}).ringbuf_bytes, 1u << 30);
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--ringbuf-size", "8192"}).ringbuf_bytes, 8192u);
}

TEST(TraceOptions, RingbufMustBePowerOfTwoOfAtLeast4K) {
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "2K"}, "power of two");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "12K"}, "power of two");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "5000"}, "power of two");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "0"}, "power of two");
}

TEST(TraceOptions, MalformedSizesAreRejected) {
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "16X"}, "16X");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "M"}, "'M'");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "16MB"}, "16MB");
  expect_usage_error({"-s", "getppid", "--ringbuf-size", "-4K"}, "-4K");
  EXPECT_THROW(parse_size(""), Error);
}

TEST(ParseSize, OverflowingSizeIsRejected) {
  // (2^54 + 4) K = 2^64 + 4 KiB: wrapping the shift would silently give 4K.
  uint64_t got = 0;
  try {
    got = parse_size("18014398509481988K");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    return;
  }
  FAIL() << "parse_size(\"18014398509481988K\") returned " << got << " instead of throwing";
}

TEST(TraceOptions, TargetQpsMustNotBeNegative) {
  EXPECT_EQ(parse_and_validate({"-s", "getppid", "--target-qps", "500"}).target_qps, 500.0);
  expect_usage_error({"-s", "getppid", "--target-qps=-1"}, "--target-qps");
}

TEST(TraceOptions, QuotasAndTraceIdArgAreParsedIntoDerivedFields) {
  const auto o = parse_and_validate({"-u", "libc:malloc", "--tenant-quota", "/sys/fs/cgroup/a=100:10",
                                     "--tenant-quota", "b=5", "--default-quota", "50:20", "--trace-id-arg",
                                     "2:bytes16"});
  ASSERT_EQ(o.tenant_quotas.size(), 2u);
  EXPECT_EQ(o.tenant_quotas[0].cgroup_path, "/sys/fs/cgroup/a");
  EXPECT_EQ(o.tenant_quotas[0].quota, (control::Quota{100.0, 10}));
  EXPECT_EQ(o.tenant_quotas[1].cgroup_path, "b");
  ASSERT_TRUE(o.default_quota);
  EXPECT_EQ(*o.default_quota, (control::Quota{50.0, 20}));
  ASSERT_TRUE(o.trace_id_arg);
  EXPECT_EQ(*o.trace_id_arg, (control::TraceIdArg{2, control::TraceIdFormat::kBytes16}));
  const auto plain = parse_and_validate({"-s", "getppid"});
  EXPECT_TRUE(plain.tenant_quotas.empty());
  EXPECT_FALSE(plain.default_quota);
  EXPECT_FALSE(plain.trace_id_arg);
}

TEST(TraceOptions, BadQuotaAndTraceIdArgTextAreUsageErrors) {
  for (auto args : {std::vector<std::string>{"--tenant-quota", "no-equals-sign"},
                    std::vector<std::string>{"--default-quota", "fast"},
                    std::vector<std::string>{"--trace-id-arg", "9"}}) {
    CLI::App app("mcp-agent");
    TraceOptions o;
    add_trace_options(*app.add_subcommand("trace"), o);
    std::vector<std::string> argv_s{"mcp-agent", "trace", "-s", "getppid"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (const auto& a : argv_s) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    try {
      validate(o);
      ADD_FAILURE() << "accepted " << args[0] << " " << args[1];
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << args[0];
    }
  }
}

TEST(TraceOptions, SyscallNamesMustBeLowercaseIdentifiers) {
  EXPECT_NO_THROW(parse_and_validate({"-s", "getppid", "-s", "exit_group", "-s", "wait4"}));
  expect_usage_error({"-s", "get-ppid"}, "get-ppid");
  expect_usage_error({"-s", "GETPPID"}, "GETPPID");
  expect_usage_error({"-s", "getppid", "-s", ""}, "--syscall");
}

// Issue 18: a launch is one trap at entry by default; --cuda-latency times it, and
// slow-launch detection (off by default) needs the latency, so it implies the flag.
TEST(TraceOptions, CudaLatencyIsOptInAndSlowLaunchImpliesIt) {
  const auto plain = parse_and_validate({"--cuda", "--pid", std::to_string(getpid())});
  EXPECT_FALSE(plain.cuda_latency);
  EXPECT_EQ(plain.slow_launch, 0ns);
  EXPECT_TRUE(parse_and_validate({"--cuda", "--cuda-latency", "--pid", std::to_string(getpid())}).cuda_latency);
  const auto slow = parse_and_validate({"--cuda", "--slow-launch", "5ms", "--pid", std::to_string(getpid())});
  EXPECT_TRUE(slow.cuda_latency);
  EXPECT_EQ(slow.slow_launch, 5ms);
  expect_usage_error({"-s", "getppid", "--cuda-latency"}, "--cuda-latency applies to CUDA probes");
}

// --config FILE: agent.yaml's sections, and the flags added to or overriding them.
class TraceConfigFile : public ::testing::Test {
 protected:
  void write(const std::string& yaml) { dir_.write("agent.yaml", "version: 1\n" + yaml); }
  test::TempDir dir_{"mcp-trace-config"};
  const std::string path_ = dir_ / "agent.yaml";
};

TEST_F(TraceConfigFile, FileSectionsBecomeTheSettingsWhenNoFlagOverridesThem) {
  write("syscalls: [getppid]\n"
        "quotas:\n  default: {rate: 100, burst: 10}\n  tenants:\n    - {cgroup_path: /a.slice, rate: 5}\n"
        "exporter: {error_only: true, sample_rate: 0.5}\n"
        "compliance:\n  rules: |\n    rule \"r\" when pid == 1 then drop = true end\n"
        "cuda: {slow_launch: 5ms}\n"
        "ready_file: ready\n");
  const auto o = parse_and_validate({"--config", path_});
  ASSERT_TRUE(o.config);
  ASSERT_EQ(o.config->probes.size(), 1u);
  EXPECT_TRUE(o.export_filter.error_only);
  EXPECT_DOUBLE_EQ(o.export_filter.sample_rate, 0.5);
  ASSERT_TRUE(o.export_filter.rules);
  EXPECT_FALSE(o.export_filter.rules->empty());
  ASSERT_TRUE(o.default_quota);
  EXPECT_EQ(*o.default_quota, (control::Quota{100, 10}));
  ASSERT_EQ(o.tenant_quotas.size(), 1u);
  EXPECT_EQ(o.tenant_quotas[0].cgroup_path, "/a.slice");
  EXPECT_EQ(o.tenant_quotas[0].quota, (control::Quota{5, 5}));
  EXPECT_EQ(o.slow_launch, 5ms);
  EXPECT_EQ(o.ready_file, (dir_ / "ready").string());
}

TEST_F(TraceConfigFile, GivenFlagsOverrideValuesAndAddToLists) {
  write("syscalls: [getppid]\n"
        "quotas:\n  default: {rate: 100}\n  tenants:\n    - {cgroup_path: /a.slice, rate: 5}\n"
        "    - {cgroup_path: /b.slice, rate: 7}\n"
        "exporter: {sample_rate: 0.5}\n"
        "cuda: {slow_launch: 5ms}\n");
  const auto o = parse_and_validate({"--config", path_, "-s", "openat", "--export-sample-rate", "1", "--error-only",
                                     "--default-quota", "9:3", "--tenant-quota", "a.slice=1:1", "--tenant-quota",
                                     "c.slice=2:2", "--slow-launch", "0", "--ready-file", "/tmp/r"});
  EXPECT_DOUBLE_EQ(o.export_filter.sample_rate, 1.0);  // given, even at its default value
  EXPECT_TRUE(o.export_filter.error_only);
  EXPECT_EQ(*o.default_quota, (control::Quota{9, 3}));
  std::vector<std::string> cgroups;
  for (const auto& t : o.tenant_quotas) cgroups.push_back(t.cgroup_path + "=" + std::to_string(t.quota.burst));
  // The file's /a.slice is replaced by the flag's; /b.slice stays; c.slice is added.
  EXPECT_EQ(cgroups, (std::vector<std::string>{"/b.slice=7", "a.slice=1", "c.slice=2"}));
  EXPECT_EQ(o.slow_launch, 0ns);
  EXPECT_EQ(o.ready_file, "/tmp/r");
}

TEST_F(TraceConfigFile, DefaultFlagValuesDoNotOverrideTheFile) {
  write("syscalls: [getppid]\nexporter: {sample_rate: 0.25}\ncuda: {slow_launch: 5ms}\n");
  const auto o = parse_and_validate({"--config", path_});
  EXPECT_DOUBLE_EQ(o.export_filter.sample_rate, 0.25);
  EXPECT_EQ(o.slow_launch, 5ms);
}

// The file's CUDA probes follow the merged settings: cuda.latency, or a --slow-launch flag.
TEST_F(TraceConfigFile, FileCudaProbesAreTimedWhenLatencyOrSlowLaunchIsAsked) {
  auto cuda_latency = [](const TraceOptions& o) {
    int timed = 0;
    for (const auto& p : o.config->probes) timed += p.kind == config::ProbeKind::kCuda && p.latency;
    return timed;
  };
  write("cuda: {enabled: true}\n");
  EXPECT_EQ(cuda_latency(parse_and_validate({"--config", path_})), 0);
  EXPECT_EQ(cuda_latency(parse_and_validate({"--config", path_, "--slow-launch", "5ms"})), 1);  // cuda:*
  EXPECT_EQ(cuda_latency(parse_and_validate({"--config", path_, "--cuda-latency"})), 1);
  write("cuda: {enabled: true, latency: true}\n");
  const auto o = parse_and_validate({"--config", path_});
  EXPECT_TRUE(o.cuda_latency);
  EXPECT_EQ(cuda_latency(o), 1);
}

TEST_F(TraceConfigFile, SettingsThatCannotBothHoldAreOneUsageLine) {
  write("syscalls: [getppid]\nbroker: {addresses: [\"127.0.0.1:1\"]}\n"
        "compliance:\n  rules: |\n    rule \"r\" when pid == 1 then drop = true end\n");
  const std::string rules = dir_.write("rules", "rule \"x\" when pid == 2 then drop = true end\n");
  expect_usage_error({"--config", path_, "--rules", rules}, "--rules and the compliance section of " + path_);
  expect_usage_error({"--config", path_, "--broker", "127.0.0.1:2"}, "--broker and broker.addresses in");
  expect_usage_error({"--config", path_, "--token-file", "/tmp/t"}, "--tls-* and --token-file go with --broker");
  expect_usage_error({"--config", path_, "-s", "getppid"}, "--syscall getppid: " + path_ + ":2:");
  // Per-probe flags with only the file's probes: they would do nothing.
  expect_usage_error({"--config", path_, "-r", "0.5"}, "--sample-rate applies to --uprobe/--usdt/--syscall/--cuda probes");
  expect_usage_error({"--config", path_, "--service", "x"}, "--service applies to");
  // With a probe of their own they apply to it.
  EXPECT_NO_THROW(parse_and_validate({"--config", path_, "-s", "openat", "-r", "0.5", "--service", "x"}));
  // The file's broker counts as --broker for --also-stdout and --spool-dir.
  EXPECT_NO_THROW(parse_and_validate({"--config", path_, "--also-stdout", "--spool-dir", dir_ / "spool"}));
}

TEST_F(TraceConfigFile, CudaInTheFileAndOnTheCommandLineExcludeEachOther) {
  write("cuda: {enabled: true}\n");
  expect_usage_error({"--config", path_, "--cuda"}, "--cuda/--cuda-lib and cuda.enabled in");
}

TEST_F(TraceConfigFile, NoProbesAnywhereIsNothingToTrace) {
  write("exporter: {error_only: true}\n");
  expect_usage_error({"--config", path_}, "nothing to trace: " + path_ + " declares no probes");
}

TEST_F(TraceConfigFile, BadFileIsAUsageErrorWithFileLineColumn) {
  write("syscalls: [getppid]\nexporter:\n  sample_rat: 0.5\n");
  TraceOptions o = parse({"--config", path_});
  try {
    validate(o);
    ADD_FAILURE() << "accepted a misspelt key";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()).rfind(path_ + ":4:3: ", 0), 0u) << e.what();
  }
}

}  // namespace
// Libraries below the front end name settings, not flags (common/setting_names.h): with the
// trace's spelling installed, as its subcommand does, the errors name the flag; without one,
// plain words that no other front end would find wrong.
TEST(TraceOptions, LowerLayerErrorsNameTheFlagThroughTheTraceSpelling) {
  use_setting_spelling(nullptr);
  expect_usage_error({"-s", "getppid", "--tenant-quota", "noequals"}, "tenant quota 'noequals'");
  use_setting_spelling(trace_flag_for);
  expect_usage_error({"-s", "getppid", "--tenant-quota", "noequals"}, "--tenant-quota 'noequals'");
  expect_usage_error({"-u", "/bin/true:main", "--trace-id-arg", "arg9"}, "--trace-id-arg 'arg9'");
  use_setting_spelling(nullptr);
  EXPECT_EQ(setting_name(Setting::kRingbufSize), "the ring buffer size");
  use_setting_spelling(trace_flag_for);
  EXPECT_EQ(setting_name(Setting::kRingbufSize), "--ringbuf-size");
  use_setting_spelling(nullptr);
}

}  // namespace mcp::cli
