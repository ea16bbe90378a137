#include "reload/diff.h"

#include <gtest/gtest.h>

#include "config/parse_config.h"

namespace mcp::reload {
namespace {

config::Config parse(const std::string& yaml) { return config::parse_config(yaml, "agent.yaml"); }

std::vector<std::string> keys(const std::vector<config::ProbeSpec>& v) {
  std::vector<std::string> out;
  for (const auto& p : v) out.push_back(p.key());
  return out;
}
std::vector<std::string> keys(const std::vector<ProbeUpdate>& v) {
  std::vector<std::string> out;
  for (const auto& u : v) out.push_back(u.after.key());
  return out;
}

const char* kBefore = R"(
probes:
  - {binary: /bin/a, symbol: f, sampling: {rate: 0.5}}
  - {binary: /bin/b, symbol: g, service: s, tags: {version: v1}}
  - {binary: /bin/c, symbol: h, trace_id: "0:u64"}
  - {binary: /bin/d, symbol: i}
syscalls: [openat, read]
)";

TEST(ConfigDiff, ClassifiesEveryProbe) {
  const auto before = parse(kBefore);
  const auto after = parse(R"(
probes:
  - {binary: /bin/a, symbol: f, sampling: {rate: 0.25}}
  - {binary: /bin/b, symbol: g, service: s, tags: {version: v2}}
  - {binary: /bin/c, symbol: h, trace_id: "0:hex32"}
  - {binary: /bin/e, symbol: j}
syscalls: [openat, write]
)");
  const ConfigDiff d = diff(before, after);
  EXPECT_EQ(keys(d.unchanged), (std::vector<std::string>{"syscall:openat"}));
  EXPECT_EQ(keys(d.sampling_changed), (std::vector<std::string>{"uprobe:/bin/a:f"}));
  EXPECT_EQ(d.sampling_changed[0].before.sampling.rate, 0.5);
  EXPECT_EQ(d.sampling_changed[0].after.sampling.rate, 0.25);
  EXPECT_EQ(keys(d.metadata_changed), (std::vector<std::string>{"uprobe:/bin/b:g"}));
  // trace_id decoding changed: a different program, so detach and attach again.
  EXPECT_EQ(keys(d.added), (std::vector<std::string>{"uprobe:/bin/c:h", "uprobe:/bin/e:j", "syscall:write"}));
  EXPECT_EQ(keys(d.removed), (std::vector<std::string>{"uprobe:/bin/c:h", "uprobe:/bin/d:i", "syscall:read"}));
  EXPECT_TRUE(d.probes_changed());
  EXPECT_FALSE(d.rules_changed);
  EXPECT_FALSE(d.broker_changed);
}

TEST(ConfigDiff, IdenticalConfigsAreEmpty) {
  const ConfigDiff d = diff(parse(kBefore), parse(kBefore));
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.unchanged.size(), 6u);
}

TEST(ConfigDiff, SelectorIsPartOfTheIdentity) {
  const ConfigDiff d = diff(parse("probes:\n  - {binary: /bin/a, symbol: f}\n"),
                            parse("probes:\n  - {binary: /bin/a, symbol: f, selector: {container_id: abc}}\n"));
  EXPECT_EQ(keys(d.added), (std::vector<std::string>{"uprobe:/bin/a:f@container=abc"}));
  EXPECT_EQ(keys(d.removed), (std::vector<std::string>{"uprobe:/bin/a:f"}));
}

// Moving a container probe to another pod (or to any container) re-attaches it.
TEST(ConfigDiff, ContainerScopeIsPartOfTheIdentity) {
  const ConfigDiff d = diff(parse("probes:\n  - {binary: /app, symbol: f, container: {pod: shop/web-a}}\n"),
                            parse("probes:\n  - {binary: /app, symbol: f, container: {pod: shop/web-b}}\n"
                                  "  - {binary: /app, symbol: g, container: {}}\n"));
  EXPECT_EQ(keys(d.added), (std::vector<std::string>{"uprobe:/app:f@in-pod=shop/web-b", "uprobe:/app:g@in-containers"}));
  EXPECT_EQ(keys(d.removed), (std::vector<std::string>{"uprobe:/app:f@in-pod=shop/web-a"}));
}

TEST(ConfigDiff, FlagsNonProbeSections) {
  const ConfigDiff d = diff(parse("node_name: a\nexporter: {error_only: false}\n"),
                            parse(R"(node_name: b
exporter: {error_only: true, otlp: {endpoint: "c:4317"}}
broker: {addresses: ["x:1"]}
metrics: {listen: "0.0.0.0:9464"}
kubernetes: {pod_labels: [app]}
quotas: {default: {rate: 5}}
cuda: {slow_launch: 2ms}
services: [{service: s, strategy: weighted, target_qps: 5, weights: {v1: 100}}]
compliance: {rules: 'rule "r" when pid == 1 then drop = true end'}
)"));
  EXPECT_FALSE(d.probes_changed());
  EXPECT_TRUE(d.node_changed);
  EXPECT_TRUE(d.exporter_changed);
  EXPECT_TRUE(d.broker_changed);
  EXPECT_TRUE(d.otlp_changed);
  EXPECT_TRUE(d.metrics_changed);
  EXPECT_TRUE(d.kubernetes_changed);
  EXPECT_TRUE(d.quotas_changed);
  EXPECT_TRUE(d.cuda_settings_changed);
  EXPECT_TRUE(d.services_changed);
  EXPECT_TRUE(d.rules_changed);
}

// cuda.latency changes which programs a launch runs: the CUDA probes re-attach.
TEST(ConfigDiff, CudaLatencyReattachesTheCudaProbes) {
  const ConfigDiff d = diff(parse("cuda: {enabled: true, libs: [libcudart.so]}\n"),
                            parse("cuda: {enabled: true, libs: [libcudart.so], latency: true}\n"));
  EXPECT_EQ(keys(d.added), (std::vector<std::string>{"cuda:libcudart.so"}));
  EXPECT_EQ(keys(d.removed), (std::vector<std::string>{"cuda:libcudart.so"}));
  EXPECT_TRUE(d.cuda_settings_changed);
}

TEST(ConfigDiff, FromEmptyEverythingIsAdded) {
  const ConfigDiff d = diff(config::Config{}, parse(kBefore));
  EXPECT_EQ(d.added.size(), 6u);
  EXPECT_TRUE(d.removed.empty());
}

}  // namespace
}  // namespace mcp::reload
