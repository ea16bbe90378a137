#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <limits>
#include <set>
#include <thread>

#include <prometheus/check_names.h>

#include "common/error.h"
#include "metrics/names.h"

namespace mcp::metrics {
namespace {

TEST(Registry, RendersHelpTypeAndSampleForEachKind) {
  Registry r;
  r.counter("mcp_a_total", "A counter.").Increment(3);
  r.gauge("mcp_b", "A gauge.").Set(-1.5);
  EXPECT_EQ(r.render(),
            "# HELP mcp_a_total A counter.\n"
            "# TYPE mcp_a_total counter\n"
            "mcp_a_total 3\n"
            "# HELP mcp_b A gauge.\n"
            "# TYPE mcp_b gauge\n"
            "mcp_b -1.5\n");
}

TEST(Registry, FamiliesComeOutInRegistrationOrderWhateverTheirType) {
  // prometheus::Registry collects counters before gauges; the page keeps our order.
  Registry r;
  r.gauge("mcp_first", "x").Set(1);
  r.add_callback({"mcp_second_total", "x", MetricType::kCounter, ""}, [] { return 2.0; });
  r.counter("mcp_third_total", "x").Increment();
  const std::string text = r.render();
  EXPECT_LT(text.find("mcp_first 1"), text.find("mcp_second_total 2")) << text;
  EXPECT_LT(text.find("mcp_second_total 2"), text.find("mcp_third_total 1")) << text;
}

TEST(Registry, LabelledFamilyRendersOneLinePerChildSortedByLabels) {
  Registry r;
  auto& fam = r.counter_family("mcp_seen_total", "Seen.", {"probe", "cpu"});
  fam.with({"uprobe", "1"}).Increment(2);
  fam.with({"cuda", "0"}).Increment();
  fam.with({"uprobe", "1"}).Increment(5);
  fam.with({"cuda", "1"}).Increment();
  // prometheus-cpp keeps labels in a map: names in alphabetical order.
  EXPECT_EQ(r.render(),
            "# HELP mcp_seen_total Seen.\n"
            "# TYPE mcp_seen_total counter\n"
            "mcp_seen_total{cpu=\"0\",probe=\"cuda\"} 1\n"
            "mcp_seen_total{cpu=\"1\",probe=\"cuda\"} 1\n"
            "mcp_seen_total{cpu=\"1\",probe=\"uprobe\"} 7\n");
}

TEST(Registry, EscapesLabelValues) {
  Registry r;
  r.gauge_family("mcp_x", "Help with \"quotes\".", {"path"}).with({"C:\\dir\n\"q\""}).Set(1);
  std::string text = r.render();
  EXPECT_NE(text.find("# HELP mcp_x Help with \"quotes\".\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_x{path=\"C:\\\\dir\\n\\\"q\\\"\"} 1\n"), std::string::npos) << text;
}

TEST(Registry, RejectsHelpTheTextFormatCannotCarry) {
  // prometheus-cpp 1.0.1 writes HELP unescaped: a newline would end the line mid-text.
  Registry r;
  EXPECT_THROW(r.gauge("mcp_nl", "two\nlines"), Error);
  EXPECT_THROW(r.counter_family("mcp_bs_total", "back\\slash", {"a"}), Error);
  EXPECT_THROW(r.add_collector("mcp_c", "x\ny", MetricType::kGauge, {}, [] { return std::vector<Sample>{}; }), Error);
  EXPECT_EQ(r.render(), "");
}

TEST(Registry, RendersSpecialValuesPrometheusCanParse) {
  Registry r;
  auto& g = r.gauge_family("mcp_v", "x", {"v"});
  g.with({"nan"}).Set(std::numeric_limits<double>::quiet_NaN());
  g.with({"inf"}).Set(std::numeric_limits<double>::infinity());
  g.with({"minf"}).Set(-std::numeric_limits<double>::infinity());
  g.with({"tenth"}).Set(0.1);
  g.with({"big"}).Set(1e21);
  const std::string text = r.render();
  EXPECT_NE(text.find("mcp_v{v=\"nan\"} Nan\n"), std::string::npos) << text;  // ParseFloat takes any case
  EXPECT_NE(text.find("mcp_v{v=\"inf\"} +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_v{v=\"minf\"} -Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_v{v=\"tenth\"} 0.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mcp_v{v=\"big\"} 1e+21\n"), std::string::npos) << text;
}

TEST(Registry, CounterIgnoresNegativeIncrements) {
  Registry r;
  auto& c = r.counter("mcp_c_total", "C.");
  c.Increment(2);
  c.Increment(-5);
  EXPECT_EQ(c.Value(), 2);
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
  r.counter(kReloads).Increment();
  r.gauge_family(kSamplingProbability).with({"uprobe"}).Set(0.25);
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
  r.gauge("mcp_fine", "x").Set(4);
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
        fam.with({t % 2 ? "a" : "b"}).Increment();
        if (i % 1000 == 0) (void)r.render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fam.with({"a"}).Value() + fam.with({"b"}).Value(), 40000);
}

TEST(AgentMetrics, EveryNameIsValidUniqueAndRegisters) {
  Registry r;
  std::set<std::string_view> names;
  for (const auto& spec : kAgentMetrics) {
    EXPECT_TRUE(prometheus::CheckMetricName(std::string(spec.name))) << spec.name;
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
  for (const char* doc : {"packaging/README.md", "docs/metrics.md"}) {
    std::ifstream in(std::string(MCP_SOURCE_DIR) + "/" + doc);
    ASSERT_TRUE(in) << doc << " missing";
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_NE(ss.str().find(metrics_markdown_table()), std::string::npos)
        << "regenerate the table in " << doc << " from metrics_markdown_table():\n"
        << metrics_markdown_table();
  }
}

}  // namespace
}  // namespace mcp::metrics
