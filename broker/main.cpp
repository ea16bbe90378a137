// mcp-broker: wires flags to mcp::broker::Broker and waits for SIGTERM/SIGINT.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "broker/broker.h"
#include "broker/broker_metrics.h"
#include "broker/store/nats_naming.h"
#include "broker/k8s/policy_controller.h"
#include "broker/k8s/token_review.h"
#include "common/duration.h"
#include "common/error.h"
#include "common/fd_limit.h"
#include "common/text_file.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "otlp/exporter_options.h"

namespace {

// "1073741824", "512M", "1G" (binary units); "-1": unlimited.
int64_t parse_bytes(const std::string& text) {
  if (text == "-1") return -1;
  size_t used = 0;
  uint64_t value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw mcp::usage_error("bad size '" + text + "'");
  }
  const std::string unit = text.substr(used);
  int shift = 0;
  if (unit == "K" || unit == "KiB") shift = 10;
  else if (unit == "M" || unit == "MiB") shift = 20;
  else if (unit == "G" || unit == "GiB") shift = 30;
  else if (unit == "T" || unit == "TiB") shift = 40;
  else if (!unit.empty() && unit != "B") throw mcp::usage_error("bad size '" + text + "'");
  if (value > (uint64_t{INT64_MAX} >> shift)) throw mcp::usage_error("size '" + text + "' too big");
  return static_cast<int64_t>(value << shift);
}

}  // namespace

int main(int argc, char** argv) {
  // Block the stop signals before any thread starts so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Each stored batch is parsed onto its own protobuf arena (tens to hundreds of KiB), freed once
  // every subscriber has sent it. glibc's default trim threshold (128 KiB) hands that memory back
  // to the kernel after nearly every batch and faults it in again for the next (6% of the
  // broker's CPU at 200k events/s). Up to 16 MiB of free heap kept per malloc arena: 0.91x CPU per
  // event (docs/performance.md, system/e2e round 7). Fixed thresholds also stop glibc moving them.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  // Connections are refused near the descriptor limit (listener.h): at the usual soft limit of
  // 1024 that would be under a thousand agents.
  mcp::raise_fd_limit();

  CLI::App app{"mcp-broker: receives sampled events from agents and serves them to subscribers"};
  mcp::broker::BrokerOptions options;
  std::string token_file;
  std::string log_level = "info";
  app.add_option("--listen", options.listen,
                 "HOST:PORT to listen on (port 0: any free port), or unix:PATH")
      ->capture_default_str();
  app.add_option("--socket-group", options.socket_group,
                 "with --listen unix:PATH: the socket is 0660 and this group's (default: 0600)");
  app.add_option("--tls-ca", options.tls_ca, "CA bundle; clients must present a certificate it signed")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", options.tls_cert, "server certificate (PEM)")->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key, "server private key (PEM)")->check(CLI::ExistingFile);
  app.add_option("--token-file", token_file,
                 "bearer tokens, one per line: 'ROLE[,ROLE] TOKEN' (ROLE: publish, subscribe, "
                 "policy, all) or a bare TOKEN for every role")
      ->check(CLI::ExistingFile);
  std::string publish_tokens, subscribe_tokens, policy_tokens;
  app.add_option("--publish-token-file", publish_tokens, "tokens (one per line) that may publish")
      ->check(CLI::ExistingFile);
  app.add_option("--subscribe-token-file", subscribe_tokens, "tokens (one per line) that may subscribe")
      ->check(CLI::ExistingFile);
  app.add_option("--policy-token-file", policy_tokens, "tokens (one per line) that may apply policies")
      ->check(CLI::ExistingFile);
  app.add_flag("--insecure", options.insecure,
               "allow listening on a non-loopback address without tokens or client certificates");
  app.add_option("--state-dir", options.state_dir,
                 "keep the journal, dedup marks and policies here across restarts");
  app.add_option("--subscriber-queue", options.subscriber_queue,
                 "packets queued per subscriber before its oldest are dropped")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string linger_max = "100ms";
  app.add_option("--subscriber-linger-max", linger_max,
                 "the longest a batched subscriber may have its packets wait to share a write")
      ->capture_default_str();
  app.add_option("--journal-max-bytes", options.journal_max_bytes, "journal size bound")
      ->capture_default_str();
  std::string agent_expiry = "30d";
  app.add_option("--agent-expiry", agent_expiry,
                 "forget an agent id (dedup marks, credential binding) unseen this long; 0: never")
      ->capture_default_str();
  app.add_option("--max-probe-series", options.max_probe_series,
                 "distinct (service, probe) pairs counted in Stats and /metrics; later pairs are "
                 "counted together as _other (bounds series an agent can create)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string backend;
  std::string max_age = "24h";
  std::string max_bytes = "1G";
  std::string duplicate_window = "2m";
  std::string publish_timeout = "10s";
  auto& nats = options.nats;
  app.add_option("--backend", backend,
                 "nats://HOST:PORT[,HOST:PORT...]: keep events and policies in this JetStream "
                 "cluster (first address preferred); default: embedded, in this process");
  app.add_option("--stream", nats.stream, "JetStream stream for the events")->capture_default_str();
  app.add_option("--stream-max-age", max_age, "drop events older than this (0: never)")
      ->capture_default_str();
  app.add_option("--stream-max-bytes", max_bytes, "stream size bound, oldest dropped (-1: none)")
      ->capture_default_str();
  app.add_option("--stream-replicas", nats.replicas,
                 "copies of every event in the cluster (1 for a single nats-server)")
      ->capture_default_str()
      ->check(CLI::Range(1, 5));
  app.add_option("--duplicate-window", duplicate_window,
                 "how long JetStream remembers batch ids; an agent replaying later duplicates")
      ->capture_default_str();
  app.add_option("--agent-bucket", nats.agent_bucket,
                 "JetStream key-value bucket binding agent ids to credentials")
      ->capture_default_str();
  app.add_option("--policy-bucket", nats.policy_bucket, "JetStream key-value bucket for policies")
      ->capture_default_str();
  std::vector<std::string> nats_sources;
  app.add_option("--nats-source", nats_sources,
                 "DOMAIN[=SERVICE]: also serve the events that brokers of the cluster with this "
                 "JetStream domain stored (of SERVICE only), copied over a leaf node by a stream "
                 "source (repeatable, one per domain; needs --backend)");
  app.add_option("--publish-timeout", publish_timeout,
                 "give up on a batch JetStream has not acked by then (the agent replays it)")
      ->capture_default_str();
  std::string publish_mode = "async";
  app.add_option("--publish-mode", publish_mode,
                 "async: pipeline an agent's batches to JetStream; sync: one round trip each")
      ->capture_default_str()
      ->check(CLI::IsMember({"async", "sync"}));
  std::string handshake_timeout = "10s";
  std::string connection_idle = "5m";
  app.add_option("--handshake-timeout", handshake_timeout,
                 "close a connection that has not finished its TLS and HTTP/2 handshake by then")
      ->capture_default_str();
  app.add_option("--connection-idle-timeout", connection_idle,
                 "close a connection with no call open this long (0: never)")
      ->capture_default_str();
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve /metrics (Prometheus) and /healthz on HOST:PORT (port 0: any free port); "
                 "default: off");
  mcp::otlp::OtlpFlags otlp;
  mcp::otlp::add_otlp_flags(app, otlp);
  bool k8s_policies = false;
  mcp::kube::ApiConfig k8s_api;
  std::string k8s_qps_window = "10s";
  double k8s_qps_hysteresis = 0.2;
  app.add_flag("--k8s-policies", k8s_policies,
               "run the SamplingPolicy controller: watch SamplingPolicy objects (every namespace) "
               "through the Kubernetes API and apply them as this broker's policies");
  bool agent_token_review = false;
  mcp::broker::TokenReviewOptions review;
  std::string agent_service_account = "mcp-system:mcp-agent";
  app.add_flag("--agent-token-review", agent_token_review,
               "agents authenticate with their own pod's ServiceAccount token, checked by a "
               "TokenReview: each may publish only as its node's name");
  app.add_option("--agent-token-audience", review.audience, "the audience agents' tokens are issued for")
      ->capture_default_str();
  app.add_option("--agent-service-account", agent_service_account,
                 "NAMESPACE:NAME of the agents' ServiceAccount")
      ->capture_default_str();
  app.add_option("--k8s-api-server", k8s_api.server,
                 "https://HOST:PORT of the Kubernetes API (default: in-cluster, $KUBERNETES_SERVICE_HOST)");
  app.add_option("--k8s-token-file", k8s_api.token_file,
                 "bearer token file (default: the pod's service account token)");
  app.add_option("--k8s-ca-file", k8s_api.ca_file, "CA bundle of the API server (default: the service account's)");
  app.add_option("--k8s-qps-window", k8s_qps_window,
                 "a SamplingPolicy's qpsThreshold compares the service's rate over this window")
      ->capture_default_str();
  app.add_option("--k8s-qps-hysteresis", k8s_qps_hysteresis,
                 "a qpsThreshold policy is removed below threshold * (1 - this)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("mcp-broker"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  try {
    for (const auto& [file, only] : {std::pair{token_file, uint8_t{0}},
                                     {publish_tokens, uint8_t{mcp::broker::kPublish}},
                                     {subscribe_tokens, uint8_t{mcp::broker::kSubscribe}},
                                     {policy_tokens, uint8_t{mcp::broker::kPolicy}}}) {
      if (file.empty()) continue;
      for (auto& g : mcp::broker::parse_token_grants(mcp::read_text_file(file, "token file"), file, only))
        options.tokens.push_back(std::move(g));
    }
    options.agent_expiry = std::chrono::duration_cast<std::chrono::seconds>(mcp::parse_duration(agent_expiry));
    options.subscriber_linger_max =
        std::chrono::duration_cast<std::chrono::milliseconds>(mcp::parse_duration(linger_max));
    // gRPC takes both as int milliseconds.
    options.handshake_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        mcp::parse_duration_up_to(handshake_timeout, std::chrono::hours(24)));
    if (options.handshake_timeout.count() <= 0) throw mcp::usage_error("--handshake-timeout must be positive");
    options.connection_idle = std::chrono::duration_cast<std::chrono::milliseconds>(
        mcp::parse_duration_up_to(connection_idle, std::chrono::hours(24 * 24)));
    mcp::otlp::finish_otlp_flags(otlp);
    options.otlp = otlp.options;
    if (!backend.empty()) {
      nats.servers = mcp::broker::parse_nats_urls(backend);
      nats.agent_expiry = options.agent_expiry;
      nats.max_age = mcp::parse_duration(max_age);
      nats.max_bytes = parse_bytes(max_bytes);
      nats.duplicate_window = mcp::parse_duration(duplicate_window);
      nats.async_publish = publish_mode == "async";
      nats.publish_timeout =
          std::chrono::duration_cast<std::chrono::milliseconds>(mcp::parse_duration(publish_timeout));
      for (const auto& text : nats_sources) {
        auto source = mcp::broker::parse_nats_source(text);
        for (const auto& other : nats.sources)
          if (other.domain == source.domain)
            throw mcp::usage_error("--nats-source: domain '" + source.domain + "' given twice (one source per domain)");
        nats.sources.push_back(std::move(source));
      }
    } else if (!nats_sources.empty()) {
      throw mcp::usage_error("--nats-source needs --backend (a JetStream cluster to copy into)");
    }
    std::optional<mcp::broker::PolicyControllerOptions> controller_options;
    if (k8s_policies) {
      std::string why;
      auto api = mcp::kube::resolve_api_config(k8s_api, why);
      if (!api) throw mcp::usage_error("--k8s-policies: " + why);
      controller_options.emplace();
      controller_options->api = *api;
      controller_options->qps_window =
          std::chrono::duration_cast<std::chrono::milliseconds>(mcp::parse_duration(k8s_qps_window));
      if (controller_options->qps_window.count() <= 0) throw mcp::usage_error("--k8s-qps-window must be positive");
      controller_options->tick = std::min(std::chrono::milliseconds(1000), controller_options->qps_window / 5);
      controller_options->qps_hysteresis = k8s_qps_hysteresis;
    }
    std::shared_ptr<mcp::broker::TokenReviewer> reviewer;
    if (agent_token_review) {
      std::string why;
      auto api = mcp::kube::resolve_api_config(k8s_api, why);
      if (!api) throw mcp::usage_error("--agent-token-review: " + why);
      const auto colon = agent_service_account.find(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == agent_service_account.size())
        throw mcp::usage_error("--agent-service-account must be NAMESPACE:NAME, not '" + agent_service_account + "'");
      review.api = *api;
      review.service_account = "system:serviceaccount:" + agent_service_account;
      reviewer = std::make_shared<mcp::broker::TokenReviewer>(review);
      options.review_token = [reviewer](std::string_view token) { return reviewer->node_of(token); };
    }
    if (!k8s_policies && !agent_token_review &&
        (!k8s_api.server.empty() || !k8s_api.token_file.empty() || !k8s_api.ca_file.empty())) {
      throw mcp::usage_error("--k8s-api-server, --k8s-token-file and --k8s-ca-file need --k8s-policies or --agent-token-review");
    }
    // Checked before the broker starts, so a bad address is a usage error with nothing running.
    std::optional<mcp::metrics::ListenAddress> metrics_address;
    if (!metrics_listen.empty()) metrics_address = mcp::metrics::parse_listen_address(metrics_listen);
    mcp::broker::Broker broker(options);
    // Declared after the broker: the server (and its scrapes of broker.stats()) stops first.
    mcp::metrics::Registry registry;
    std::optional<mcp::metrics::MetricsServer> metrics_server;
    if (metrics_address) {
      mcp::broker::register_broker_metrics(registry, broker);
      metrics_server.emplace(
          registry,
          [&broker] {
            const auto h = broker.health();
            return mcp::metrics::HealthStatus{h.ok, h.reason};
          },
          *metrics_address);
      metrics_server->start();
      // Before the "listening on" line: whoever waits for that one can read this one too.
      std::fprintf(stderr, "mcp-broker: metrics on %s:%d\n", metrics_address->host.c_str(),
                   metrics_server->port());
    }
    // After the broker (stopped before it): the controller applies policies through it.
    std::optional<mcp::broker::PolicyController> controller;
    if (controller_options) {
      controller.emplace(*controller_options, mcp::broker::broker_policy_target(broker));
      controller->start();
    }
    if (options.listen.starts_with("unix:")) {
      std::fprintf(stderr, "mcp-broker: listening on %s\n", options.listen.c_str());
    } else {
      const auto colon = options.listen.rfind(':');
      std::fprintf(stderr, "mcp-broker: listening on %s:%d\n",
                   options.listen.substr(0, colon).c_str(), broker.port());
    }
    std::fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("signal {}: shutting down", sig);
    if (controller) controller->stop();
    broker.shutdown(std::chrono::seconds(2));
    return 0;
  } catch (const mcp::Error& e) {
    std::fprintf(stderr, "mcp-broker: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mcp-broker: %s\n", e.what());
    return 1;
  }
}
