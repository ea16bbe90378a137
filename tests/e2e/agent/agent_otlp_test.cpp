// OTLP from the agent with every real component: mcp-agent tracing the workload through real
// BPF, and an OTLP receiver built in the test from the official protos (tests/support) on
// 127.0.0.1:0. Directly (`trace --otlp-endpoint`, `run` with exporter.otlp), and through a real
// mcp-broker with --otlp-endpoint. Timed calls arrive as spans whose adjusted counts add up to
// the calls made, untimed ones as log records; a collector that is down or never answers makes
// the run say how many events did not arrive and exit 1, within the drain limit.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "../../support/otlp_collector.h"
#include "common/event.h"
#include "../../support/process.h"
#include "../../support/run_command.h"
#include "../../support/trace_ids.h"
#include "../../support/broker_client.h"
#include "../../support/broker_process.h"

namespace mcp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::BrokerProcess;
using test::OtlpCollector;
using test::run_command;
using test::wait_until;
namespace common = opentelemetry::proto::common::v1;
namespace resource = opentelemetry::proto::resource::v1;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

const common::AnyValue* find(const google::protobuf::RepeatedPtrField<common::KeyValue>& attrs,
                             const std::string& key) {
  for (const auto& kv : attrs)
    if (kv.key() == key) return &kv.value();
  return nullptr;
}

std::string string_attr(const resource::Resource& r, const std::string& key) {
  const auto* v = find(r.attributes(), key);
  return v ? v->string_value() : "<absent>";
}

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// Spans and log records of the collector, with their resources, flattened.
struct Record {
  const resource::Resource* resource;
  const google::protobuf::RepeatedPtrField<common::KeyValue>* attributes;
  std::string name;  // span name or log body
  uint64_t start = 0, end = 0;
  std::string trace_state;
  std::string trace_id;  // 16 bytes
  std::string span_id, parent_span_id;  // spans only
};
std::vector<Record> spans_of(const OtlpCollector::Received& got) {
  std::vector<Record> out;
  for (const auto& req : got.traces)
    for (const auto& rs : req.resource_spans())
      for (const auto& ss : rs.scope_spans())
        for (const auto& s : ss.spans())
          out.push_back({&rs.resource(), &s.attributes(), s.name(), s.start_time_unix_nano(), s.end_time_unix_nano(),
                         s.trace_state(), s.trace_id(), s.span_id(), s.parent_span_id()});
  return out;
}
std::vector<Record> logs_of(const OtlpCollector::Received& got) {
  std::vector<Record> out;
  for (const auto& req : got.logs)
    for (const auto& rl : req.resource_logs())
      for (const auto& sl : rl.scope_logs())
        for (const auto& l : sl.log_records())
          out.push_back({&rl.resource(), &l.attributes(), l.body().string_value(), l.time_unix_nano(),
                         l.time_unix_nano(), "", l.trace_id()});
  return out;
}
double weight(const Record& r) {
  const auto* v = find(*r.attributes, "sampling.adjusted_count");
  return v ? v->double_value() : -1;
}

// The workload's calls (`traceid N SEED FORMAT`) a trace-id decision at acceptance threshold A
// keeps, by OTel's rule written out here: keep iff R >= 2^56 - (A >> 8), R = the id's low 56 bits.
std::set<std::string> reference_kept_ids(size_t calls, uint64_t seed, uint64_t a) {
  std::set<std::string> out;
  for (const auto& id : test::workload_trace_ids(calls, seed))
    if (id.randomness() >= test::otel_rejection_threshold(a)) out.insert(id.bytes());
  return out;
}

// What a collector got from a trace-id decision at acceptance threshold A: spans that carry
// exactly the application's ids the reference keeps, each with tracestate ot=th:<T> and R >= T,
// and the adjusted count 2^64 / A.
void expect_trace_id_spans(const std::vector<Record>& spans, const std::set<std::string>& expected, uint64_t a,
                           const std::string& probe) {
  std::set<std::string> ids;
  const std::string th = "ot=th:" + test::otel_th(a);
  for (const auto& s : spans) {
    ASSERT_EQ(s.trace_id.size(), 16u);
    EXPECT_TRUE(ids.insert(s.trace_id).second) << "one span per kept call";
    EXPECT_EQ(s.name, probe);
    EXPECT_EQ(s.trace_state, th);
    uint64_t r = 0;
    for (int i = 9; i < 16; ++i) r = r << 8 | static_cast<uint8_t>(s.trace_id[static_cast<size_t>(i)]);
    EXPECT_GE(r, test::otel_rejection_threshold(a)) << "a kept id below T";
    EXPECT_NEAR(weight(s), std::ldexp(1.0, 64) / static_cast<double>(a), 1e-6);
  }
  EXPECT_EQ(ids.size(), expected.size());
  EXPECT_TRUE(ids == expected) << "the exported trace ids are not the ones the reference keeps";
}

class AgentOtlp : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    dir_ = test::make_temp_dir("mcp-agent-otlp");
  }
  void TearDown() override {
    broker_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::vector<std::string> otlp_flags() const {
    return {"--otlp-endpoint", collector_.address(), "--otlp-insecure", "--otlp-interval", "50ms"};
  }
  // The agent's "otlp: collector ..., exported N" summary line.
  static uint64_t exported(const std::string& err) {
    std::smatch m;
    if (!std::regex_search(err, m, std::regex("otlp: collector \\S+, exported ([0-9]+),"))) return UINT64_MAX;
    return std::stoull(m[1]);
  }

  OtlpCollector collector_;
  fs::path dir_;
  std::unique_ptr<BrokerProcess> broker_;
};

// 20000 calls kept at p = 0.1 by the kernel's random draw: each span carries weight 10, and the
// sum is the call count within four standard deviations (sd = sqrt(N (1 - p) / p) ≈ 424). The
// run ends only once the collector accepted them all, so no waiting after it.
TEST_F(AgentOtlp, TraceExportsTimedUprobeCallsAsSpansWithAdjustedCounts) {
  constexpr int kCalls = 20000;
  constexpr double kP = 0.1;
  // --no-windows: a burst of calls sampled call by call (binomial), not in time windows.
  std::vector<std::string> argv{kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--latency", "--sample-rate", "0.1",
                                "--no-windows", "--service", "checkout"};
  for (const auto& f : otlp_flags()) argv.push_back(f);
  for (const std::string a : {"--", kWorkload.c_str(), "calls", "20000"}) argv.push_back(a);
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "") << "events go to the collector, not stdout, without --also-stdout";
  const auto rows = test::parse_summary(r.err);
  ASSERT_TRUE(rows.count(kWorkload + ":mcp_work")) << r.err;
  const uint64_t kept = rows.at(kWorkload + ":mcp_work").delivered;
  ASSERT_GT(kept, 0u);
  EXPECT_EQ(exported(r.err), kept) << r.err;
  const auto got = collector_.received();
  const auto spans = spans_of(got);
  ASSERT_EQ(spans.size(), kept);
  double sum = 0;
  for (const auto& s : spans) {
    EXPECT_EQ(string_attr(*s.resource, "service.name"), "checkout");
    EXPECT_EQ(string_attr(*s.resource, "process.executable.name"), "mcp-workload");
    EXPECT_EQ(string_attr(*s.resource, "host.name"), this_host());
    ASSERT_NE(find(s.resource->attributes(), "process.pid"), nullptr);
    EXPECT_GT(find(s.resource->attributes(), "process.pid")->int_value(), 0);
    EXPECT_EQ(s.name, kWorkload + ":mcp_work");
    EXPECT_GT(s.end, s.start);
    EXPECT_EQ(s.trace_state, "") << "a random draw says nothing about the trace id";
    EXPECT_NEAR(weight(s), 1 / kP, 1e-6);
    sum += weight(s);
  }
  EXPECT_NEAR(sum, kCalls, 4 * std::sqrt(kCalls * (1 - kP) / kP)) << kept << " kept";
  EXPECT_EQ(collector_.log_records(), 0u);
}

// Issue 29: a timed call's span is [entry, entry + duration], so a recursion's frames nest:
// 20 trees of 3 frames, each frame the child of the one that called it, in one trace.
TEST_F(AgentOtlp, RecursiveCallsExportAsNestedChildSpansOfOneTrace) {
  std::vector<std::string> argv{kAgent, "trace", "--uprobe", kWorkload + ":mcp_recurse", "--latency"};
  for (const auto& f : otlp_flags()) argv.push_back(f);
  for (const std::string a : {"--", kWorkload.c_str(), "recurse", "20", "3"}) argv.push_back(a);
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto spans = spans_of(collector_.received());
  ASSERT_EQ(spans.size(), 60u) << r.err;
  std::map<std::string, const Record*> by_id;
  for (const auto& s : spans) by_id[s.span_id] = &s;
  size_t children = 0;
  for (const auto& s : spans) {
    if (s.parent_span_id.empty()) continue;
    ASSERT_TRUE(by_id.count(s.parent_span_id)) << "a parent outside the export";
    const Record& parent = *by_id[s.parent_span_id];
    children++;
    EXPECT_LE(parent.start, s.start);
    EXPECT_GE(parent.end, s.end);
    EXPECT_EQ(parent.trace_id, s.trace_id);
  }
  // Two of each tree's three frames have a parent; a tree split between two export blocks
  // loses a link, which a run this short almost never sees.
  EXPECT_GE(children, 36u);
  EXPECT_LE(children, 40u);
}

// A trace-id decision (--trace-id-arg, the id a pointer to 32 hex characters, 16 raw bytes, or
// the integer argument itself): every exported span carries the application's own trace id,
// exactly those ids OTel's rule keeps, and tracestate ot=th: with the exact threshold the
// kernel used; the JSON printed alongside (--also-stdout) has the same ids and th.
TEST_F(AgentOtlp, TraceIdDecisionsExportTheApplicationsTraceIdsAndExactThreshold) {
  constexpr size_t kCalls = 4000;
  constexpr uint64_t kSeed = 1234;
  // p = 0.1 is no power of two: its th has all 14 digits, so a rounded threshold shows.
  for (const std::string format : {"hex32", "bytes16", "u64"}) {
    SCOPED_TRACE(format);
    OtlpCollector collector;
    const bool u64 = format == "u64";
    const std::string probe = kWorkload + (u64 ? ":mcp_handle_u64" : ":mcp_handle");
    auto r = run_command({kAgent, "trace", "--uprobe", probe, "--latency", "--sample-rate", "0.1", "--trace-id-arg",
                          "0:" + format, "--otlp-endpoint", collector.address(), "--otlp-insecure", "--otlp-interval",
                          "50ms", "--also-stdout", "--", kWorkload, "traceid", std::to_string(kCalls),
                          std::to_string(kSeed), format});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ids = test::workload_trace_ids(kCalls, kSeed);
    const auto events = test::parse_json_lines(r.out);
    ASSERT_FALSE(events.empty()) << r.err;
    const uint64_t a = events[0]["threshold"].get<uint64_t>();
    for (const auto& e : events) {
      ASSERT_EQ(e["threshold"].get<uint64_t>(), a);
      const auto call = e["args"][1].get<size_t>();
      ASSERT_LT(call, kCalls);
      // N:u64: the argument is the id's low half, the high half 0.
      const test::W3cTraceId id = u64 ? test::W3cTraceId{0, ids[call].lo} : ids[call];
      EXPECT_EQ(e["trace_id"], id.hex()) << "call " << call;
      EXPECT_EQ(e["th"], test::otel_th(a));
    }
    std::set<std::string> expected;
    for (const auto& id : ids) {
      const test::W3cTraceId as_sent = u64 ? test::W3cTraceId{0, id.lo} : id;
      if (as_sent.randomness() >= test::otel_rejection_threshold(a)) expected.insert(as_sent.bytes());
    }
    EXPECT_EQ(events.size(), expected.size());
    EXPECT_NEAR(static_cast<double>(expected.size()), kCalls * 0.1, 5 * std::sqrt(kCalls * 0.1 * 0.9));
    const auto got = collector.received();
    expect_trace_id_spans(spans_of(got), expected, a, probe);
    EXPECT_EQ(collector.log_records(), 0u);
  }
}

// Syscalls: with --latency each call is a span; without, a log record (body: the probe).
TEST_F(AgentOtlp, TraceExportsSyscallsAsSpansWithLatencyAndAsLogRecordsWithout) {
  constexpr int kCalls = 300;
  for (const bool latency : {true, false}) {
    OtlpCollector collector;
    std::vector<std::string> argv{kAgent, "trace", "--syscall", "getppid", "--service", "sys", "--otlp-endpoint",
                                  collector.address(), "--otlp-insecure"};
    if (latency) argv.push_back("--latency");
    for (const std::string a : {"--", kWorkload.c_str(), "getppid", "300"}) argv.push_back(a);
    auto r = run_command(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = collector.received();
    const auto records = latency ? spans_of(got) : logs_of(got);
    EXPECT_EQ((latency ? logs_of(got) : spans_of(got)).size(), 0u);
    size_t from_workload = 0;
    for (const auto& rec : records) {
      if (string_attr(*rec.resource, "process.executable.name") != "mcp-workload") continue;
      EXPECT_EQ(rec.name, "syscall:getppid");
      EXPECT_EQ(weight(rec), 1.0);
      EXPECT_EQ(string_attr(*rec.resource, "service.name"), "sys");
      ++from_workload;
    }
    EXPECT_EQ(from_workload, static_cast<size_t>(kCalls)) << (latency ? "spans" : "log records") << "\n" << r.err;
  }
}

// Issue 31: with OTLP on, the compliance audit trail reaches the collector too: one log record
// per trail record, in its own scope, whose body is the line the trail holds (so the chain can
// be checked from the backend) and whose seq and hash attributes match it (the hash: its MAC).
TEST_F(AgentOtlp, TheAuditTrailIsExportedAsLogRecordsMatchingTheFile) {
  const std::string rules = (dir_ / "rules").string();
  std::ofstream(rules) << "rule \"pii\" when args[0] >= 90 then redact = [\"args[1]\"] audit.trace = [\"GDPR-9\"] end\n";
  const std::string trail = (dir_ / "trail").string();
  std::vector<std::string> argv{kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--latency", "--rules", rules,
                                "--audit-log", trail};
  for (const auto& f : otlp_flags()) argv.push_back(f);
  for (const std::string a : {"--", kWorkload.c_str(), "calls", "100"}) argv.push_back(a);
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  {
    std::ifstream in(trail + "/audit-000000000001.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 10u);
  const auto got = collector_.received();
  std::vector<std::string> bodies;
  for (const auto& req : got.logs)
    for (const auto& rl : req.resource_logs())
      for (const auto& sl : rl.scope_logs()) {
        if (sl.scope().name() != "mcp-sampling.audit") continue;
        EXPECT_EQ(string_attr(rl.resource(), "service.name"), "mcp-agent");
        EXPECT_EQ(string_attr(rl.resource(), "host.name"), this_host());
        for (const auto& l : sl.log_records()) {
          const auto* name = find(l.attributes(), "event.name");
          ASSERT_NE(name, nullptr);
          EXPECT_EQ(name->string_value(), "mcp.audit");
          const auto j = nlohmann::json::parse(l.body().string_value());
          EXPECT_EQ(find(l.attributes(), "mcp.audit.seq")->int_value(), j["seq"].get<int64_t>());
          ASSERT_TRUE(j.contains("mac")) << l.body().string_value();
          EXPECT_EQ(find(l.attributes(), "mcp.audit.hash")->string_value(), j["mac"].get<std::string>());
          EXPECT_EQ(l.time_unix_nano(), j["ts_ns"].get<uint64_t>());
          bodies.push_back(l.body().string_value());
        }
      }
  EXPECT_EQ(bodies, lines) << "every trail record, in chain order, as the file holds it";
  EXPECT_EQ(spans_of(got).size(), 100u) << "the events themselves still arrive";
}

// Nothing listens: every attempt is refused, the exporter gives up after its retries, and the
// run reports the events as undelivered and fails, as it does for a broker that is down.
TEST_F(AgentOtlp, TraceWithTheCollectorDownReportsUndeliveredEventsAndExitsOne) {
  test::RefusingPort down;
  auto r = run_command({kAgent, "trace", "-s", "getppid", "--otlp-endpoint", down.address(), "--otlp-insecure", "--",
                        kWorkload, "getppid", "200"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mcp-agent: 200 events undelivered to the OTLP collector " + down.address()),
            std::string::npos)
      << r.err;
}

// The collector accepts the connection and never answers: the drain limit (10 s) ends the wait,
// the call in flight is cancelled, and the run fails instead of hanging.
TEST_F(AgentOtlp, TraceWithASilentCollectorEndsWithinTheDrainLimit) {
  test::BlackholeListener silent;
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command({kAgent, "trace", "-s", "getppid", "--otlp-endpoint", silent.address(), "--otlp-insecure",
                        "--", kWorkload, "getppid", "50"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("50 events undelivered to the OTLP collector"), std::string::npos) << r.err;
  EXPECT_LT(took, 60s) << "bounded by the drain limit, not by the exporter's retries";
}

// Bad OTLP flags are usage errors before anything is attached.
TEST_F(AgentOtlp, TraceOtlpFlagsWithoutAnEndpointAreUsageErrors) {
  auto r = run_command({kAgent, "trace", "-s", "getppid", "--otlp-insecure", "--", kWorkload, "getppid", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("need --otlp-endpoint"), std::string::npos) << r.err;
  r = run_command({kAgent, "trace", "-s", "getppid", "--otlp-endpoint", collector_.address(), "--otlp-header",
                   "bad key=1", "--", kWorkload, "getppid", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OTLP header key 'bad key'"), std::string::npos) << r.err;
}

// `mcp-agent run` with exporter.otlp in agent.yaml (no broker): the daemon's events reach the
// collector with the configured header, and a clean stop exits 0.
TEST_F(AgentOtlp, DaemonWithExporterOtlpExportsToTheCollector) {
  constexpr int kCalls = 200;
  // getppid is traced node-wide: count the calls of a copy of the workload with its own name.
  const fs::path caller = dir_ / ("otlpwl" + std::to_string(getpid() % 100000));
  fs::copy_file(kWorkload, caller);
  const std::string comm = caller.filename().string();
  const fs::path config = dir_ / "agent.yaml";
  std::ofstream(config) << "version: 1\n"
                           "metrics:\n  listen: 127.0.0.1:0\n"
                           "syscalls:\n  - name: getppid\n    service: node\n"
                           "exporter:\n"
                           "  otlp:\n"
                           "    endpoint: " << collector_.address() << "\n"
                           "    insecure: true\n"
                           "    interval: 50ms\n"
                           "    headers: { x-tenant: lab }\n";
  fs::permissions(config, fs::perms::owner_read | fs::perms::owner_write);
  test::Process agent({kAgent, "run", "--config", config.string()}, dir_, "agent");
  ASSERT_TRUE(agent.wait_for_err(std::regex("mcp-agent: ready: "), 20s)) << agent.err();
  EXPECT_NE(agent.err().find("exporting to the OTLP collector " + collector_.address()), std::string::npos)
      << agent.err();
  ASSERT_EQ(run_command({caller.string(), "getppid", std::to_string(kCalls)}).exit_code, 0);
  auto from_caller = [&] {
    size_t n = 0;
    const auto got = collector_.received();  // the records point into it
    // The daemon's syscall probes time their calls: spans (log records would count as well).
    auto records = spans_of(got);
    for (auto& rec : logs_of(got)) records.push_back(rec);
    for (const auto& rec : records)
      n += string_attr(*rec.resource, "process.executable.name") == comm && rec.name == "syscall:getppid";
    return n;
  };
  EXPECT_TRUE(wait_until([&] { return from_caller() >= kCalls; }, 20s)) << from_caller() << "\n" << agent.err();
  agent.signal(SIGTERM);
  EXPECT_EQ(agent.wait(30s), std::optional<int>(0)) << agent.err();
  EXPECT_EQ(from_caller(), static_cast<size_t>(kCalls));
  const auto got = collector_.received();
  ASSERT_FALSE(got.metadata.empty());
  for (const auto& md : got.metadata) {
    const auto it = md.find("x-tenant");
    ASSERT_NE(it, md.end());
    EXPECT_EQ(it->second, "lab");
  }
  for (const auto& rec : spans_of(got)) EXPECT_EQ(string_attr(*rec.resource, "service.name"), "node");
}

// Agent → broker → OTLP: the broker maps what the agent forwarded; host.name is the agent's
// host, which the agent now sends in its Hello.
TEST_F(AgentOtlp, ThroughTheBrokerTimedCallsBecomeSpansWhoseAdjustedCountsSumToTheCalls) {
  constexpr int kCalls = 20000;
  constexpr double kP = 0.1;
  broker_ = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--otlp-endpoint", collector_.address(), "--otlp-insecure", "--otlp-interval", "50ms",
                               "--otlp-metrics-interval", "100ms"},
      dir_ / "broker.log");
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--latency", "--no-windows", "--sample-rate", "0.1",
                        "--broker", broker_->address(), "--service", "checkout", "--", kWorkload, "calls",
                        std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto acked = r.err.find("acked ");
  ASSERT_NE(acked, std::string::npos) << r.err;
  const size_t kept = std::stoul(r.err.substr(acked + 6));
  ASSERT_GT(kept, 0u);
  ASSERT_TRUE(wait_until([&] { return collector_.spans() == kept; }, 20s))
      << collector_.spans() << " of " << kept << "\n" << broker_->log_text();
  double sum = 0;
  const auto got = collector_.received();  // the records point into it
  for (const auto& s : spans_of(got)) {
    EXPECT_EQ(string_attr(*s.resource, "service.name"), "checkout");
    EXPECT_EQ(string_attr(*s.resource, "process.executable.name"), "mcp-workload");
    EXPECT_EQ(string_attr(*s.resource, "host.name"), this_host());
    EXPECT_EQ(s.name, kWorkload + ":mcp_work");
    EXPECT_GE(s.end, s.start);
    EXPECT_NEAR(weight(s), 1 / kP, 1e-6);
    sum += weight(s);
  }
  EXPECT_NEAR(sum, kCalls, 4 * std::sqrt(kCalls * (1 - kP) / kP)) << kept << " kept";
  EXPECT_EQ(collector_.log_records(), 0u);
}

// Agent → broker → OTLP with a trace-id decision: the broker's spans carry the application's
// trace ids the kernel kept (exactly OTel's reference set) and ot=th: at the agent's threshold.
TEST_F(AgentOtlp, ThroughTheBrokerTraceIdDecisionsKeepTheApplicationsTraceIdsAndThreshold) {
  constexpr size_t kCalls = 4000;
  constexpr uint64_t kSeed = 77;
  broker_ = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--otlp-endpoint", collector_.address(), "--otlp-insecure", "--otlp-interval", "50ms"},
      dir_ / "broker.log");
  const std::string probe = kWorkload + ":mcp_handle";
  auto r = run_command({kAgent, "trace", "--uprobe", probe, "--latency", "--sample-rate", "0.01", "--trace-id-arg",
                        "0:hex32", "--broker", broker_->address(), "--service", "checkout", "--", kWorkload, "traceid",
                        std::to_string(kCalls), std::to_string(kSeed)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto acked = r.err.find("acked ");
  ASSERT_NE(acked, std::string::npos) << r.err;
  // p = 0.01: the reference value for th.
  const uint64_t a = probability_to_threshold(0.01);
  ASSERT_EQ(test::otel_th(a), "fd70a3d70a3d71");
  const auto expected = reference_kept_ids(kCalls, kSeed, a);
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(std::stoul(r.err.substr(acked + 6)), expected.size()) << "the kernel kept other calls than OTel's rule";
  ASSERT_TRUE(wait_until([&] { return collector_.spans() >= expected.size(); }, 20s))
      << collector_.spans() << " of " << expected.size() << "\n" << r.err << broker_->log_text();
  const auto got = collector_.received();
  const auto spans = spans_of(got);
  expect_trace_id_spans(spans, expected, a, probe);
  for (const auto& s : spans) EXPECT_EQ(string_attr(*s.resource, "service.name"), "checkout");
}

TEST_F(AgentOtlp, ThroughTheBrokerUntimedSyscallsBecomeLogRecords) {
  constexpr int kCalls = 300;
  broker_ = std::make_unique<BrokerProcess>(
      std::vector<std::string>{"--otlp-endpoint", collector_.address(), "--otlp-insecure", "--otlp-interval", "50ms"},
      dir_ / "broker.log");
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--broker", broker_->address(), "--service", "sys",
                        "--", kWorkload, "getppid", std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(wait_until([&] { return collector_.log_records() >= kCalls; }, 20s)) << collector_.log_records();
  size_t from_workload = 0;
  const auto got = collector_.received();  // the records point into it
  for (const auto& l : logs_of(got)) {
    if (string_attr(*l.resource, "process.executable.name") != "mcp-workload") continue;
    EXPECT_EQ(l.name, "syscall:getppid");
    EXPECT_EQ(weight(l), 1.0);
    ++from_workload;
  }
  EXPECT_EQ(from_workload, static_cast<size_t>(kCalls));
}

}  // namespace
}  // namespace mcp
