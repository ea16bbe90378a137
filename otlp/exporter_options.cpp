#include "otlp/exporter_options.h"

#include <CLI/CLI.hpp>

#include <cctype>

#include "common/duration.h"
#include "common/error.h"
#include "common/text_file.h"

namespace mcp::otlp {

std::pair<std::string, std::string> parse_header(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw usage_error("OTLP header '" + std::string(text) + "' is not KEY=VALUE");
  std::string key(text.substr(0, eq));
  for (char& c : key) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
      throw usage_error("OTLP header key '" + std::string(text.substr(0, eq)) +
                        "' may hold only letters, digits, '-', '_' and '.'");
  }
  if (key.starts_with("grpc-") || key.ends_with("-bin"))
    throw usage_error("OTLP header key '" + key + "' is reserved or binary");
  std::string value(text.substr(eq + 1));
  for (const char c : value)
    if (c < 0x20 || c > 0x7e)
      throw usage_error("OTLP header '" + key + "' has a value that is not printable ASCII");
  return {std::move(key), std::move(value)};
}

std::vector<std::pair<std::string, std::string>> parse_header_lines(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    out.push_back(parse_header(line));
  }
  return out;
}

void add_otlp_flags(CLI::App& app, OtlpFlags& f) {
  auto& o = f.options;
  app.add_option("--otlp-endpoint", o.endpoint,
                 "HOST:PORT of an OpenTelemetry collector (OTLP/gRPC): export every kept event as a "
                 "span (timed calls) or log record, and estimated call/error counts as metrics");
  app.add_option("--otlp-header", f.headers,
                 "KEY=VALUE sent with every OTLP export (repeatable), e.g. authorization=Bearer ...");
  app.add_option("--otlp-header-file", f.header_file,
                 "file of KEY=VALUE lines sent as OTLP headers (keeps tokens off the command line)")
      ->check(CLI::ExistingFile);
  app.add_option("--otlp-ca", o.ca_file,
                 "CA bundle that signed the collector's certificate (default: the system's roots)")
      ->check(CLI::ExistingFile);
  app.add_flag("--otlp-insecure", o.insecure, "send OTLP in plaintext (no TLS)");
  app.add_option("--otlp-queue", o.queue_events,
                 "events waiting for the collector before newer ones are dropped (counted)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--otlp-batch", o.batch_events, "events per OTLP export request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--otlp-interval", f.interval, "send a partial OTLP batch after this long")
      ->capture_default_str();
  app.add_option("--otlp-metrics-interval", f.metrics_interval,
                 "how often estimated call/error counts are exported (0: never)")
      ->capture_default_str();
  app.add_option("--otlp-timeout", f.timeout, "deadline of one OTLP export call")->capture_default_str();
}

void finish_otlp_flags(OtlpFlags& f) {
  auto& o = f.options;
  if (o.endpoint.empty()) {
    if (!f.headers.empty() || !f.header_file.empty() || !o.ca_file.empty() || o.insecure)
      throw usage_error("--otlp-header, --otlp-header-file, --otlp-ca and --otlp-insecure need --otlp-endpoint");
    return;
  }
  if (o.insecure && !o.ca_file.empty()) throw usage_error("--otlp-ca and --otlp-insecure exclude each other");
  o.headers.clear();
  if (!f.header_file.empty()) o.headers = parse_header_lines(read_text_file(f.header_file, "OTLP header file"));
  for (const auto& h : f.headers) o.headers.push_back(parse_header(h));
  auto ms = [](const std::string& text) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(text));
  };
  o.batch_interval = ms(f.interval);
  o.metrics_interval = ms(f.metrics_interval);
  o.timeout = ms(f.timeout);
  if (o.timeout.count() <= 0 || o.batch_interval.count() <= 0)
    throw usage_error("--otlp-timeout and --otlp-interval must be positive");
}

}  // namespace mcp::otlp
