// `mcp-agent subscribe`: a consumer that prints the broker's packets as JSON lines (the bytes `trace`
// prints for the event plus the broker's fields, see packet_printer.h) or a table. Registration follows common/command.h.
//   mcp-agent subscribe --broker ADDR[,ADDR...] [--service NAME] [--tag k=v]... [--sampling-rate R]
//                       [--format json|table] [--max-packets N] [--tls-ca F --tls-cert F --tls-key F]
//                       [--token-file F]
// Exit 0 after --max-packets (or when the stream ends with --no-reconnect), 1 when the broker
// refuses the subscription, 2 for bad flags. Broker-reported drops go to stderr.
#pragma once
#include <CLI/CLI.hpp>

#include "common/command.h"
#include "common/setting_names.h"

namespace mcp::commands {

void add_subscribe_command(CLI::App& app, CommandAction& action);
// The flags of the broker clients (`subscribe`, `policy`) for settings lower layers name.
std::string broker_client_flag_for(Setting s);

}  // namespace mcp::commands
