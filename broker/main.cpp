// mcp-broker: wires flags to mcp::broker::Broker and waits for SIGTERM/SIGINT.
#include <signal.h>

#include <cstdio>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "broker/broker.h"
#include "common/error.h"
#include "forward/channel.h"

int main(int argc, char** argv) {
  // Block the stop signals before any thread starts so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CLI::App app{"mcp-broker: receives sampled events from agents and serves them to subscribers"};
  mcp::broker::BrokerOptions options;
  std::string token_file;
  std::string log_level = "info";
  app.add_option("--listen", options.listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--tls-ca", options.tls_ca, "CA bundle; clients must present a certificate it signed")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", options.tls_cert, "server certificate (PEM)")->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key, "server private key (PEM)")->check(CLI::ExistingFile);
  app.add_option("--token-file", token_file, "require this bearer token (first line of the file)")
      ->check(CLI::ExistingFile);
  app.add_option("--state-dir", options.state_dir,
                 "keep the journal, dedup marks and policies here across restarts");
  app.add_option("--subscriber-queue", options.subscriber_queue,
                 "packets queued per subscriber before its oldest are dropped")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--journal-max-bytes", options.journal_max_bytes, "journal size bound")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("mcp-broker"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  try {
    options.token = mcp::read_token_file(token_file);
    mcp::broker::Broker broker(options);
    const auto colon = options.listen.rfind(':');
    std::fprintf(stderr, "mcp-broker: listening on %s:%d\n",
                 options.listen.substr(0, colon).c_str(), broker.port());
    std::fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("signal {}: shutting down", sig);
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
