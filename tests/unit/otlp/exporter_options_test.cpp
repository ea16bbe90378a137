// The --otlp-* flags mcp-broker and `mcp-agent trace` share (otlp/exporter_options.h), parsed by
// a real CLI11 app as both front ends do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "otlp/exporter_options.h"

namespace mcp::otlp {
namespace {

namespace fs = std::filesystem;
using Headers = std::vector<std::pair<std::string, std::string>>;

OtlpFlags parse(std::vector<std::string> args) {
  CLI::App app;
  OtlpFlags flags;
  add_otlp_flags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  finish_otlp_flags(flags);
  return flags;
}

TEST(OtlpFlags, FlagsBecomeExporterOptions) {
  const fs::path file = fs::temp_directory_path() / ("mcp-otlp-headers-" + std::to_string(getpid()));
  std::ofstream(file) << "# the collector's token\nAuthorization=Bearer t0k\r\n\nx-scope=a=b\n";
  const auto f = parse({"--otlp-endpoint", "collector:4317", "--otlp-header-file", file.string(), "--otlp-header",
                        "X-Tenant=lab", "--otlp-interval", "250ms", "--otlp-timeout", "2s", "--otlp-metrics-interval",
                        "0", "--otlp-queue", "10", "--otlp-batch", "5", "--otlp-insecure"});
  fs::remove(file);
  const auto& o = f.options;
  EXPECT_EQ(o.endpoint, "collector:4317");
  EXPECT_TRUE(o.insecure);
  EXPECT_EQ(o.headers, (Headers{{"authorization", "Bearer t0k"}, {"x-scope", "a=b"}, {"x-tenant", "lab"}}));
  EXPECT_EQ(o.batch_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(o.metrics_interval, std::chrono::milliseconds(0));
  EXPECT_EQ(o.queue_events, 10u);
  EXPECT_EQ(o.batch_events, 5u);
}

TEST(OtlpFlags, NoEndpointMeansOffAndTheOtherFlagsAreUsageErrors) {
  EXPECT_TRUE(parse({}).options.endpoint.empty());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--otlp-insecure"}, {"--otlp-header", "a=b"}}) {
    try {
      parse(args);
      FAIL() << args[0];
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find("need --otlp-endpoint"), std::string::npos) << e.what();
    }
  }
}

TEST(OtlpFlags, BadCombinationsAndValuesAreUsageErrors) {
  const fs::path ca = fs::temp_directory_path() / ("mcp-otlp-ca-" + std::to_string(getpid()));
  std::ofstream(ca) << "pem";
  EXPECT_THROW(parse({"--otlp-endpoint", "c:1", "--otlp-insecure", "--otlp-ca", ca.string()}), Error);
  fs::remove(ca);
  EXPECT_THROW(parse({"--otlp-endpoint", "c:1", "--otlp-header", "novalue"}), Error);
  EXPECT_THROW(parse({"--otlp-endpoint", "c:1", "--otlp-interval", "0s"}), Error);
  EXPECT_THROW(parse({"--otlp-endpoint", "c:1", "--otlp-timeout", "soon"}), Error);
}

TEST(OtlpFlags, HeaderLinesSkipCommentsAndBlankLines) {
  EXPECT_EQ(parse_header_lines("#c\n\nA=1\r\nb=2"), (Headers{{"a", "1"}, {"b", "2"}}));
  EXPECT_THROW(parse_header_lines("A=1\nnot a header\n"), Error);
}

}  // namespace
}  // namespace mcp::otlp
