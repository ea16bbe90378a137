#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <limits>
#include <set>
#include <thread>

#include "common/error.h"
#include "metrics/names.h"

namespace mcp::metrics {
namespace {

TEST(Registry, RendersHelpTypeAndSampleForEachKind) {
  Registry r;
  r.counter("mcp_a_total", "A counter.").inc(3);
  r.gauge("mcp_b", "A gauge.").set(-1.5);
  EXPECT_EQ(r.render(),
            "# HELP mcp_a_total A counter.\n"
            "# TYPE mcp_a_total counter\n"
            "mcp_a_total 3\n"
            "# HELP mcp_b A gauge.\n"
            "# TYPE mcp_b gauge\n"
            "mcp_b -1.5\n");
}

TEST(Registry, LabelledFamilyRendersOneLinePerChildSortedByLabels) {
  Registry r;
  auto& fam = r.counter_family("mcp_seen_total", "Seen.", {"probe", "cpu"});
  fam.with({"uprobe", "1"}).inc(2);
  fam.with({"cuda", "0"}).inc();
  fam.with({"uprobe", "1"}).inc(5);
  EXPECT_EQ(r.render(),
            "# HELP mcp_seen_total Seen.\n"
            "# TYPE mcp_seen_total counter\n"
            "mcp_seen_total{probe=\"cuda\",cpu=\"0\"} 1\n"
            "mcp_seen_total{probe=\"uprobe\",cpu=\"1\"} 7\n");
}

TEST(Registry, EscapesLabelValuesAndHelp) {
  Registry r;
  r.gauge_family("mcp_x", "Line one\\two\nthree \"quoted\"", {"path"})
      .with({"C:\\dir\n\"q\""})
      .set(1);
  std::string text = r.render();
  EXPECT_NE(text.find("# HELP mcp_x Line one\\\\two\\nthree \"quoted\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_x{path=\"C:\\\\dir\\n\\\"q\\\"\"} 1\n"), std::string::npos) << text;
}

TEST(Registry, FormatsSpecialValuesAsPrometheusSpells) {
  EXPECT_EQ(format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e21), "1e+21");
  EXPECT_EQ(format_value(18446744073709551615.0), "18446744073709551616");  // exact, not rounded
}

TEST(Registry, CounterIgnoresNegativeIncrements) {
  Registry r;
  auto& c = r.counter("mcp_c_total", "C.");
  c.inc(2);
  c.inc(-5);
  EXPECT_EQ(c.value(), 2);
}

TEST(Registry, RejectsDuplicateAndMalformedNames) {
  Registry r;
  r.gauge("mcp_dup", "x");
  EXPECT_THROW(r.counter("mcp_dup", "y"), Error);
  EXPECT_THROW(r.gauge("9starts_with_digit", "x"), Error);
  EXPECT_THROW(r.gauge("has-dash", "x"), Error);
  EXPECT_THROW(r.gauge_family("mcp_l", "x", {"__reserved"}), Error);
  EXPECT_THROW(r.gauge_family("mcp_l2", "x", {"bad-label"}), Error);
  auto& fam = r.gauge_family("mcp_ok", "x", {"a"});
  EXPECT_THROW(fam.with({"1", "2"}), Error);
}

TEST(Registry, SpecOverloadsEnforceTypeAndLabels) {
  Registry r;
  r.counter(kReloads).inc();
  r.gauge_family(kSamplingProbability).with({"uprobe"}).set(0.25);
  EXPECT_THROW(r.gauge(kForwardErrors), Error);        // a counter
  EXPECT_THROW(r.counter(kEventsSeen), Error);         // labelled
  EXPECT_THROW(r.gauge_family(kSpoolBytes), Error);    // unlabelled
  std::string text = r.render();
  EXPECT_NE(text.find("mcp_config_reloads_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("mcp_sampling_probability{probe=\"uprobe\"} 0.25\n"), std::string::npos);
}

TEST(Registry, CollectorIsReadAtScrapeTime) {
  Registry r;
  double queue = 7;
  r.add_callback(kQueueDepth, [&] { return queue; });
  EXPECT_NE(r.render().find("mcp_forward_queue_depth 7\n"), std::string::npos);
  queue = 9;
  EXPECT_NE(r.render().find("mcp_forward_queue_depth 9\n"), std::string::npos);
}

TEST(Registry, LabelledCollectorReportsEachProbe) {
  Registry r;
  r.add_collector(kEventsSeen, [] {
    return std::vector<Sample>{{{"syscall"}, 10}, {{"cuda"}, 2}};
  });
  std::string text = r.render();
  EXPECT_NE(text.find("# TYPE mcp_events_seen_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("mcp_events_seen_total{probe=\"syscall\"} 10\n"), std::string::npos);
  EXPECT_NE(text.find("mcp_events_seen_total{probe=\"cuda\"} 2\n"), std::string::npos);
}

TEST(Registry, BrokenCollectorDoesNotHideOtherMetrics) {
  Registry r;
  r.add_collector("mcp_throws", "x", MetricType::kGauge, {}, []() -> std::vector<Sample> {
    throw std::runtime_error("boom");
  });
  r.add_collector("mcp_wrong_arity", "x", MetricType::kGauge, {"a"},
                  [] { return std::vector<Sample>{{{}, 1}}; });
  r.gauge("mcp_fine", "x").set(4);
  std::string text = r.render();
  EXPECT_EQ(text.find("\nmcp_throws "), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE mcp_throws gauge\n"), std::string::npos);
  EXPECT_EQ(text.find("\nmcp_wrong_arity"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_fine 4\n"), std::string::npos);
}

TEST(Registry, UpdatesFromManyThreadsAreAllCounted) {
  Registry r;
  auto& fam = r.counter_family("mcp_t_total", "t", {"probe"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        fam.with({t % 2 ? "a" : "b"}).inc();
        if (i % 1000 == 0) (void)r.render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fam.with({"a"}).value() + fam.with({"b"}).value(), 40000);
}

TEST(AgentMetrics, EveryNameIsValidUniqueAndRegisters) {
  Registry r;
  std::set<std::string_view> names;
  for (const auto& spec : kAgentMetrics) {
    EXPECT_TRUE(valid_metric_name(spec.name)) << spec.name;
    EXPECT_TRUE(names.insert(spec.name).second) << "duplicate " << spec.name;
    if (spec.type == MetricType::kCounter) {
      EXPECT_TRUE(spec.name.ends_with("_total")) << spec.name;
    }
    r.add_collector(spec, [&] {
      return std::vector<Sample>{{spec.label.empty() ? std::vector<std::string>{}
                                                     : std::vector<std::string>{"x"},
                                  1}};
    });
  }
  std::string text = r.render();
  for (const auto& spec : kAgentMetrics) {
    EXPECT_NE(text.find("# TYPE " + std::string(spec.name)), std::string::npos) << spec.name;
  }
}

TEST(AgentMetrics, CoversEverySeriesTheIssueLists) {
  // issue 8: seen/kept/lost per probe, quota drops per tenant, ring buffer occupancy,
  // current rate per probe, queue depth, spool bytes, forward errors, reloads and reload
  // failures, clock drift ppm and residual.
  std::set<std::string_view> names;
  for (const auto& spec : kAgentMetrics) names.insert(spec.name);
  for (std::string_view want :
       {"mcp_events_seen_total", "mcp_events_kept_total", "mcp_events_lost_total",
        "mcp_quota_drops_total", "mcp_ringbuf_occupancy_bytes", "mcp_probe_rate_events_per_second",
        "mcp_forward_queue_depth", "mcp_spool_bytes", "mcp_forward_errors_total",
        "mcp_config_reloads_total", "mcp_config_reload_failures_total", "mcp_clock_drift_ppm",
        "mcp_clock_residual_seconds"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  EXPECT_EQ(kEventsSeen.label, "probe");
  EXPECT_EQ(kQuotaDrops.label, "tenant_bucket");
}

}  // namespace
}  // namespace mcp::metrics

namespace mcp::metrics {
namespace {

TEST(AgentMetrics, DeploymentDocsListExactlyTheseMetrics) {
  std::ifstream in(std::string(MCP_SOURCE_DIR) + "/packaging/README.md");
  ASSERT_TRUE(in) << "packaging/README.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(metrics_markdown_table()), std::string::npos)
      << "regenerate the table in packaging/README.md from metrics_markdown_table():\n"
      << metrics_markdown_table();
}

}  // namespace
}  // namespace mcp::metrics
