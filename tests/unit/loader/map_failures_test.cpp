// MapFailures (loader/map_io.h): every failure counted, the first of each map logged at warn.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <sstream>

#include "loader/map_io.h"

namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

TEST(MapFailures, CountsEveryFailureAndWarnsOncePerMap) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("%l %v");
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("map_failures_test", sink);
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);

  mcp::loader::MapFailures failures;
  failures.report("probe_configs", "cannot stop removed group member x (probe 3) from sampling", EIO);
  failures.report("probe_configs", "cannot stop removed group member y (probe 4) from sampling", EIO);
  failures.report("scope_cgroups", "cannot take cgroup 9 out of probe 1's scope", EPERM);
  spdlog::set_default_logger(previous);

  EXPECT_EQ(failures.count(), 3u);
  const std::string log = out.str();
  EXPECT_EQ(count_of(log, "warning BPF map probe_configs: cannot stop removed group member x (probe 3)"), 1u) << log;
  EXPECT_EQ(count_of(log, "debug BPF map probe_configs: cannot stop removed group member y (probe 4)"), 1u) << log;
  EXPECT_EQ(count_of(log, "warning BPF map scope_cgroups"), 1u) << log;
  EXPECT_NE(log.find("Input/output error"), std::string::npos) << log;
  EXPECT_NE(log.find("mcp_bpf_map_failures_total"), std::string::npos) << log;
}

}  // namespace
