// agent.yaml's outputs: `broker:` (where batches go) and `exporter:` (its filters and the
// OTLP collector).
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "common/duration.h"
#include "common/error.h"
#include "common/sampling_bounds.h"
#include "common/text_file.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "otlp/exporter_options.h"

namespace mcp::config {

using yaml::Ctx;
using yaml::MapReader;
using yaml::kind_name;
using yaml::read_bool;
using yaml::read_integer;
using yaml::read_number;
using yaml::read_string;
using yaml::valid_endpoint;

void read_broker(Ctx& ctx, const YAML::Node& n, BrokerConfig& out) {
  MapReader m(ctx, n, "broker", {"addresses", "token_file", "tls", "compression", "batch_gap"});
  if (!m.valid()) return;
  if (!m.has("addresses")) {
    ctx.error(n, "broker needs 'addresses'");
  } else {
    const YAML::Node a = m.get("addresses");
    std::vector<YAML::Node> items;
    if (a.IsScalar()) items.push_back(a);
    else if (a.IsSequence()) for (const auto& i : a) items.push_back(i);
    else ctx.error(a, "broker.addresses must be a list of host:port");
    if (a.IsSequence() && a.size() == 0) ctx.error(a, "broker.addresses must not be empty");
    for (const auto& i : items) {
      auto s = read_string(ctx, i, "broker address");
      if (!s) continue;
      if (!valid_endpoint(*s, true, false)) ctx.error(i, "broker address '" + *s + "' is not host:port");
      else out.addresses.push_back(*s);
    }
  }
  if (m.has("token_file"))
    if (auto s = read_string(ctx, m.get("token_file"), "broker.token_file")) out.token_file = *s;
  if (m.has("compression")) {
    if (auto s = read_string(ctx, m.get("compression"), "broker.compression")) {
      if (*s == "none" || *s == "gzip") out.compression = *s;
      else ctx.error(m.get("compression"), "broker.compression must be none or gzip, not '" + *s + "'");
    }
  }
  if (m.has("batch_gap")) {
    if (auto s = read_string(ctx, m.get("batch_gap"), "broker.batch_gap")) {
      try {
        out.batch_gap = mcp::parse_duration_up_to(*s, std::chrono::seconds(1));
      } catch (const mcp::Error& e) {
        ctx.error(m.get("batch_gap"), std::string("broker.batch_gap: ") + e.what());
      }
    }
  }
  if (m.has("tls")) {
    MapReader t(ctx, m.get("tls"), "broker.tls", {"ca", "cert", "key"});
    if (!t.valid()) return;
    TlsConfig tls;
    if (t.has("ca")) if (auto s = read_string(ctx, t.get("ca"), "broker.tls.ca")) tls.ca = *s;
    if (t.has("cert")) if (auto s = read_string(ctx, t.get("cert"), "broker.tls.cert")) tls.cert = *s;
    if (t.has("key")) if (auto s = read_string(ctx, t.get("key"), "broker.tls.key")) tls.key = *s;
    if (t.has("cert") != t.has("key"))
      ctx.error(m.get("tls"), "broker.tls needs both 'cert' and 'key' (client certificate) or neither");
    out.tls = tls;
  }
}

namespace {

// exporter.otlp: the settings `trace --otlp-*` takes (otlp/exporter_options.h), as keys.
// Relative ca / header_file paths are the config directory's, as compliance.file.
void read_otlp(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, otlp::ExporterOptions& out) {
  MapReader m(ctx, n, "exporter.otlp",
              {"endpoint", "insecure", "ca", "headers", "header_file", "queue", "batch", "interval", "timeout",
               "metrics_interval"});
  if (!m.valid()) return;
  auto path = [&](const std::string& s) { return s.front() == '/' ? s : (base_dir / s).string(); };
  if (!m.has("endpoint")) ctx.error(n, "exporter.otlp needs 'endpoint' (host:port of the collector)");
  else if (auto s = read_string(ctx, m.get("endpoint"), "exporter.otlp.endpoint")) {
    if (!valid_endpoint(*s, true, false)) ctx.error(m.get("endpoint"), "exporter.otlp.endpoint '" + *s + "' is not host:port");
    else out.endpoint = *s;
  }
  if (m.has("insecure")) if (auto b = read_bool(ctx, m.get("insecure"), "exporter.otlp.insecure")) out.insecure = *b;
  if (m.has("ca")) if (auto s = read_string(ctx, m.get("ca"), "exporter.otlp.ca")) out.ca_file = path(*s);
  if (out.insecure && !out.ca_file.empty())
    ctx.error(m.key_node("insecure"), "exporter.otlp: 'insecure' and 'ca' exclude each other");
  // A header problem names the header, never its value (tokens stay out of logs).
  auto header = [&](const YAML::Node& where, const std::string& text) {
    try {
      out.headers.push_back(otlp::parse_header(text));
    } catch (const mcp::Error& e) {
      ctx.error(where, std::string("exporter.otlp.headers: ") + e.what());
    }
  };
  if (m.has("header_file")) {
    if (auto s = read_string(ctx, m.get("header_file"), "exporter.otlp.header_file")) {
      try {
        out.headers = otlp::parse_header_lines(read_text_file(path(*s), "OTLP header file"));
      } catch (const mcp::Error& e) {
        ctx.error(m.get("header_file"), std::string("exporter.otlp.header_file: ") + e.what());
      }
    }
  }
  if (m.has("headers")) {
    const YAML::Node h = m.get("headers");
    if (!h.IsMap()) {
      ctx.error(h, std::string("exporter.otlp.headers must be a mapping of KEY: VALUE, found ") + kind_name(h));
    } else {
      for (auto it = h.begin(); it != h.end(); ++it) {
        const YAML::Node k = it->first, v = it->second;
        if (!k.IsScalar() || !v.IsScalar()) ctx.error(k, "exporter.otlp.headers entries must be KEY: VALUE strings");
        else header(k, k.Scalar() + "=" + v.Scalar());
      }
    }
  }
  auto positive = [&](const char* key, size_t& field) {
    if (!m.has(key)) return;
    const std::string what = std::string("exporter.otlp.") + key;
    if (auto v = read_integer(ctx, m.get(key), what)) {
      if (*v <= 0) ctx.error(m.get(key), what + " must be positive");
      else field = static_cast<size_t>(*v);
    }
  };
  positive("queue", out.queue_events);
  positive("batch", out.batch_events);
  auto duration = [&](const char* key, std::chrono::milliseconds& field, bool zero_ok) {
    if (!m.has(key)) return;
    const std::string what = std::string("exporter.otlp.") + key;
    if (auto s = read_string(ctx, m.get(key), what)) {
      try {
        const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(mcp::parse_duration(*s));
        if (d.count() < 0 || (d.count() == 0 && !zero_ok)) ctx.error(m.get(key), what + " must be positive");
        else field = d;
      } catch (const mcp::Error& e) {
        ctx.error(m.get(key), what + ": " + e.what());
      }
    }
  };
  duration("interval", out.batch_interval, false);
  duration("timeout", out.timeout, false);
  duration("metrics_interval", out.metrics_interval, true);
}

}  // namespace

void read_exporter(Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, Config& cfg) {
  MapReader m(ctx, n, "exporter", {"error_only", "sample_rate", "otlp"});
  if (!m.valid()) return;
  auto& out = cfg.exporter;
  if (m.has("error_only")) if (auto b = read_bool(ctx, m.get("error_only"), "exporter.error_only")) out.error_only = *b;
  if (m.has("sample_rate")) {
    if (auto r = read_number(ctx, m.get("sample_rate"), "exporter.sample_rate")) {
      if (!valid_sampling_rate(*r)) ctx.error(m.get("sample_rate"), std::string("exporter.sample_rate must be in ") + kSamplingRateRange);
      else out.sample_rate = *r;
    }
  }
  if (m.has("otlp")) read_otlp(ctx, m.get("otlp"), base_dir, cfg.otlp.emplace());
}

}  // namespace mcp::config
