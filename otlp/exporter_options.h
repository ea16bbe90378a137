// ExporterOptions: where and how the OTLP exporter (exporter.h) sends, and the one place that
// turns command-line flags into them, so mcp-broker and `mcp-agent trace` accept the same
// --otlp-* flags with the same checks (agent.yaml's exporter.otlp fills the same struct).
// No gRPC or proto types here: the config parser links this without the exporter.
//
// Contract:
// - add_otlp_flags() registers --otlp-endpoint, --otlp-header (repeatable), --otlp-header-file,
//   --otlp-ca, --otlp-insecure, --otlp-queue, --otlp-batch, --otlp-interval,
//   --otlp-metrics-interval and --otlp-timeout on a CLI11 app.
// - finish_otlp_flags() after parsing: checks them as a whole and fills flags.options; throws
//   mcp::Error (usage) with one line. Without --otlp-endpoint, any other --otlp-* flag that
//   was given is an error, and options.endpoint stays empty (export off).
// - parse_header() / header_file_lines() are the header rules every source shares.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace mcp::otlp {

struct ExporterOptions {
  std::string endpoint;  // HOST:PORT of the collector's OTLP/gRPC receiver
  std::string ca_file;   // PEM roots for TLS; empty: the system's
  bool insecure = false; // plaintext (no TLS)
  std::vector<std::pair<std::string, std::string>> headers;
  size_t queue_events = 65536;
  size_t batch_events = 1024;
  std::chrono::milliseconds batch_interval{500};
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  int max_attempts = 6;
  std::chrono::milliseconds metrics_interval{10000};
  bool operator==(const ExporterOptions&) const = default;
};

// "KEY=VALUE" as a header: key lower-cased, [0-9a-z._-] only, not grpc-* or *-bin; value
// printable ASCII. Throws mcp::Error (usage) with the reason.
std::pair<std::string, std::string> parse_header(std::string_view key_equals_value);

// The KEY=VALUE lines of a header file's text (blank lines and '#' comments skipped, CRLF
// accepted), each checked by parse_header.
std::vector<std::pair<std::string, std::string>> parse_header_lines(std::string_view text);

// The flags' texts until finish_otlp_flags() turns them into `options`.
struct OtlpFlags {
  ExporterOptions options;
  std::vector<std::string> headers;
  std::string header_file;
  std::string interval = "500ms";
  std::string metrics_interval = "10s";
  std::string timeout = "5s";
};

void add_otlp_flags(CLI::App& app, OtlpFlags& flags);
void finish_otlp_flags(OtlpFlags& flags);

}  // namespace mcp::otlp
