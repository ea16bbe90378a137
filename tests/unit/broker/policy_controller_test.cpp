// parse_sampling_policy: a SamplingPolicy object -> the broker policy, or one line naming the
// field the broker cannot apply. (The controller's list/watch/status behaviour runs end to end
// in tests/e2e/broker/policy_controller_e2e_test.cpp.)
#include "broker/k8s/policy_controller.h"

#include <gtest/gtest.h>

namespace mcp::broker {
namespace {

using nlohmann::json;

json object(const json& spec) {
  return {{"metadata", {{"namespace", "shop"}, {"name", "cart"}, {"uid", "u1"}, {"generation", 3}}}, {"spec", spec}};
}

TEST(ParseSamplingPolicy, CarriesEveryFieldAndTheConditions) {
  std::string error;
  const auto spec = parse_sampling_policy(
      object({{"service", "cart"}, {"probe", "syscall"}, {"targetQps", 200}, {"qpsThreshold", 500},
              {"serviceLabels", {{"version", "v2"}}}, {"traceIdPrefix", "00AF"}, {"strategy", "uniform"}}),
      error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->policy.service(), "cart");
  EXPECT_EQ(spec->policy.probe(), "syscall");
  EXPECT_EQ(spec->policy.target_qps(), 200);
  EXPECT_EQ(spec->policy.sampling_rate(), 0);
  EXPECT_EQ(spec->qps_threshold, 500);
  EXPECT_EQ(spec->policy.service_labels().at("version"), "v2");
  EXPECT_EQ(spec->policy.trace_id_prefix(), "00af");  // the CRD admits either case
  EXPECT_EQ(spec->policy.source(), "SamplingPolicy shop/cart");
}

TEST(ParseSamplingPolicy, NamesWhatTheBrokerCannotApply) {
  const std::vector<std::pair<json, std::string>> cases{
      {json::object(), "spec.service"},
      {{{"service", "a"}}, "sampling_rate or target_qps"},
      {{{"service", "a"}, {"samplingRate", 2}}, "sampling_rate"},
      {{{"service", "a"}, {"samplingRate", "half"}}, "spec.samplingRate"},
      {{{"service", "a"}, {"samplingRate", 1}, {"qpsThreshold", -1}}, "qpsThreshold"},
      {{{"service", "a"}, {"targetQps", 5}, {"strategy", "weighted"}}, "weighted"},
      {{{"service", "a"}, {"samplingRate", 1}, {"traceIdPrefix", "xyz"}}, "trace_id_prefix"},
      // Issue 51: stored as a policy on the whole probe, not a prefix rule.
      {{{"service", "a"}, {"samplingRate", 1}, {"traceIdPrefix", ""}}, "spec.traceIdPrefix is empty"},
      {{{"service", "a"}, {"samplingRate", 1}, {"serviceLabels", {{"k", 1}}}}, "serviceLabels.k"},
  };
  for (const auto& [spec, field] : cases) {
    std::string error;
    EXPECT_FALSE(parse_sampling_policy(object(spec), error)) << spec.dump();
    EXPECT_NE(error.find(field), std::string::npos) << spec.dump() << ": " << error;
  }
}

}  // namespace
}  // namespace mcp::broker
