// Agent → broker → OTLP with every real component: mcp-agent tracing the workload through real
// BPF, a real mcp-broker with --otlp-endpoint, and an OTLP receiver built in the test from the
// official protos. Timed calls arrive as spans whose adjusted counts add up to the calls made;
// untimed syscalls as log records.
#include <gtest/gtest.h>

#include <cmath>

#include "../../support/otlp_collector.h"
#include "../../support/run_command.h"
#include "../broker/broker_client.h"
#include "../broker/broker_process.h"

namespace mcp {
namespace {

using namespace std::chrono_literals;
using test::BrokerProcess;
using test::OtlpCollector;
using test::run_command;
using test::wait_until;
namespace common = opentelemetry::proto::common::v1;

const std::string kAgent = std::string(MCP_BIN_DIR) + "/mcp-agent";
const std::string kWorkload = std::string(MCP_TEST_DIR) + "/mcp-workload";

const common::AnyValue* find(const google::protobuf::RepeatedPtrField<common::KeyValue>& attrs,
                             const std::string& key) {
  for (const auto& kv : attrs)
    if (kv.key() == key) return &kv.value();
  return nullptr;
}

class AgentOtlpE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    MCP_REQUIRE_BPF();
    dir_ = test::make_temp_dir("mcp-agent-otlp");
    broker_ = std::make_unique<BrokerProcess>(
        std::vector<std::string>{"--otlp-endpoint", collector_.address(), "--otlp-insecure",
                                 "--otlp-interval", "50ms", "--otlp-metrics-interval", "100ms"},
        dir_ / "broker.log");
  }
  void TearDown() override {
    broker_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  OtlpCollector collector_;
  std::filesystem::path dir_;
  std::unique_ptr<BrokerProcess> broker_;
};

// 20000 calls kept at p = 0.1 by the kernel's random draw: each span carries weight 10, and the
// sum is the call count within four standard deviations (sd = sqrt(N (1 - p) / p) ≈ 424).
TEST_F(AgentOtlpE2E, TimedCallsBecomeSpansWhoseAdjustedCountsSumToTheCalls) {
  constexpr int kCalls = 20000;
  constexpr double kP = 0.1;
  auto r = run_command({kAgent, "trace", "--uprobe", kWorkload + ":mcp_work", "--latency", "--sample-rate", "0.1",
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
  for (const auto& req : collector_.received().traces)
    for (const auto& rs : req.resource_spans()) {
      const auto& res = rs.resource().attributes();
      EXPECT_EQ(find(res, "service.name")->string_value(), "checkout");
      EXPECT_EQ(find(res, "process.executable.name")->string_value(), "mcp-workload");
      EXPECT_NE(find(res, "host.name"), nullptr);
      for (const auto& ss : rs.scope_spans())
        for (const auto& s : ss.spans()) {
          EXPECT_EQ(s.name(), kWorkload + ":mcp_work");
          EXPECT_GE(s.end_time_unix_nano(), s.start_time_unix_nano());
          const double w = find(s.attributes(), "sampling.adjusted_count")->double_value();
          EXPECT_NEAR(w, 1 / kP, 1e-6);
          sum += w;
        }
    }
  EXPECT_NEAR(sum, kCalls, 4 * std::sqrt(kCalls * (1 - kP) / kP)) << kept << " kept";
  EXPECT_EQ(collector_.log_records(), 0u);
}

TEST_F(AgentOtlpE2E, UntimedSyscallsBecomeLogRecords) {
  constexpr int kCalls = 300;
  auto r = run_command({kAgent, "trace", "--syscall", "getppid", "--broker", broker_->address(), "--service",
                        "sys", "--", kWorkload, "getppid", std::to_string(kCalls)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(wait_until([&] { return collector_.log_records() >= kCalls; }, 20s)) << collector_.log_records();
  size_t from_workload = 0;
  for (const auto& req : collector_.received().logs)
    for (const auto& rl : req.resource_logs()) {
      if (find(rl.resource().attributes(), "process.executable.name")->string_value() != "mcp-workload") continue;
      for (const auto& sl : rl.scope_logs())
        for (const auto& l : sl.log_records()) {
          EXPECT_EQ(l.body().string_value(), "syscall:getppid");
          EXPECT_EQ(find(l.attributes(), "sampling.adjusted_count")->double_value(), 1.0);
          ++from_workload;
        }
    }
  EXPECT_EQ(from_workload, static_cast<size_t>(kCalls));
}

}  // namespace
}  // namespace mcp
