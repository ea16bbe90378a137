// Settings that libraries below the front ends name in their messages, and how the running
// front end spells them: `trace` and `subscribe` as flags, `run` as agent.yaml keys. A library
// writes setting_name(Setting::kX) into a message and never a flag; the front end installs its
// spelling once, before it parses anything (use_setting_spelling); without one a setting reads
// as plain words. One front end runs per process, so the spelling is process-wide.
#pragma once
#include <string>

namespace mcp {

enum class Setting {
  kRingbufSize,    // the ring buffer's size
  kTenantQuota,    // one tenant's quota: CGROUP_PATH=RATE[:BURST], pod:NS/NAME=..., namespace:NS=...
  kTraceIdArg,     // where a probe's trace id is read from
  kTlsClientCert,  // the client certificate and its key (mTLS), given together
  kBrokers,        // the broker addresses
  kUprobe,         // a uprobe: BINARY:SYMBOL
  kPodNames,       // pod names from the API server
};

using SettingSpelling = std::string (*)(Setting);

void use_setting_spelling(SettingSpelling spelling);
// What the user writes for `s` in the running front end.
std::string setting_name(Setting s);
// Plain words for `s` (the spelling without a front end).
std::string setting_words(Setting s);

}  // namespace mcp
