#include "commands/subscribe.h"

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/duration.h"
#include "common/error.h"
#include "subscribe/packet_printer.h"
#include "subscribe/subscribe_client.h"

namespace mcp::commands {
namespace {

struct SubscribeFlags {
  std::string brokers;
  std::string service;
  std::vector<std::string> tags;
  double sampling_rate = 1.0;
  std::string format = "json";
  uint64_t max_packets = 0;
  uint64_t max_events = 0;
  bool receipt_ns = false;
  bool no_reconnect = false;
  std::string linger = "0";
  std::string output;  // empty: stdout
  TlsFiles tls;
  std::string token_file;
};

int run_subscribe(const SubscribeFlags& flags) {
  SubscribeOptions options;
  options.brokers = parse_broker_list(flags.brokers);
  options.service = flags.service;
  for (const auto& tag : flags.tags) {
    const auto eq = tag.find('=');
    if (eq == std::string::npos || eq == 0)
      throw usage_error("--tag '" + tag + "' is not KEY=VALUE");
    options.tags[tag.substr(0, eq)] = tag.substr(eq + 1);
  }
  options.sampling_rate = flags.sampling_rate;
  options.tls = flags.tls;
  options.token_file = flags.token_file;
  options.reconnect = !flags.no_reconnect;
  options.compact = true;
  options.linger = std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(flags.linger));
  SubscribeClient client(options);
  PacketPrinter printer(flags.format, flags.receipt_ns);
  int fd = STDOUT_FILENO;
  if (!flags.output.empty()) {
    fd = ::open(flags.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw usage_error("cannot write --output '" + flags.output + "': " + std::strerror(errno));
  }
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd != STDOUT_FILENO) ::close(fd);
    }
  } close_fd{fd};
  // One buffer, written once per packet (a few hundred events) with write(2): no stream
  // formatting or per-event string on the way to the file.
  std::string out;
  out.reserve(1 << 20);
  printer.header(out);
  bool output_ok = true;
  auto write_out = [&] {
    size_t off = 0;
    while (off < out.size()) {
      const ssize_t n = ::write(fd, out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        output_ok = false;  // a closed pipe (`| head`): stop quietly
        break;
      }
      off += static_cast<size_t>(n);
    }
    out.clear();
  };
  uint64_t packets = 0, events = 0;
  uint64_t reported_drops = 0;
  client.run([&](const mcp::v1::SamplePacket& packet) {
    const uint64_t room = flags.max_events ? flags.max_events - events : UINT64_MAX;
    events += printer.print(packet, out, room);
    write_out();
    if (packet.dropped_packets() > 0) {
      reported_drops += packet.dropped_packets();
      std::fprintf(stderr,
                   "mcp-agent subscribe: broker dropped %llu packets (%llu samples) for this "
                   "subscriber (too slow); %llu in total\n",
                   static_cast<unsigned long long>(packet.dropped_packets()),
                   static_cast<unsigned long long>(packet.dropped_samples()),
                   static_cast<unsigned long long>(reported_drops));
    }
    if (!output_ok) return false;
    if (flags.max_events && events >= flags.max_events) return false;
    return flags.max_packets == 0 || ++packets < flags.max_packets;
  });
  write_out();
  return 0;
}

}  // namespace

std::string broker_client_flag_for(Setting s) {
  switch (s) {
    case Setting::kBrokers: return "--broker";
    case Setting::kTlsClientCert: return "--tls-cert and --tls-key";
    default: return setting_words(s);
  }
}

void add_subscribe_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<SubscribeFlags>();
  CLI::App* cmd = app.add_subcommand("subscribe", "print events a broker receives, as JSON lines");
  cmd->add_option("--broker", flags->brokers, "HOST:PORT[,HOST:PORT...] of mcp-broker")->required();
  cmd->add_option("--service", flags->service, "only this service");
  cmd->add_option("--tag", flags->tags, "only samples with this tag (KEY=VALUE, repeatable)");
  cmd->add_option("--sampling-rate", flags->sampling_rate,
                  "keep this fraction, consistently by trace id; weights stay exact")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--format", flags->format, "json or table")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
  cmd->add_option("--max-packets", flags->max_packets, "exit after this many packets");
  cmd->add_option("--max-events", flags->max_events, "exit after printing this many events");
  cmd->add_flag("--receipt-ns", flags->receipt_ns, "add received_ns (wall clock at receipt) to each JSON line");
  cmd->add_option("--output", flags->output, "write the events to this file instead of stdout");
  cmd->add_flag("--no-reconnect", flags->no_reconnect, "exit when the stream ends");
  cmd->add_option("--linger", flags->linger,
                  "let the broker hold packets this long (e.g. 20ms) so they share a write: less "
                  "broker CPU per subscriber for that much more latency (bounded by its "
                  "--subscriber-linger-max)")
      ->capture_default_str();
  cmd->add_option("--tls-ca", flags->tls.ca, "CA that signed the broker's certificate")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-cert", flags->tls.cert, "client certificate for mTLS")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key", flags->tls.key, "client key for mTLS")->check(CLI::ExistingFile);
  cmd->add_option("--token-file", flags->token_file, "bearer token (first line of the file)")
      ->check(CLI::ExistingFile);
  cmd->callback([flags, &action] {
    use_setting_spelling(broker_client_flag_for);
    action = [flags] { return run_subscribe(*flags); };
  });
}

}  // namespace mcp::commands
