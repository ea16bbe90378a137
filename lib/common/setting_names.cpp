#include "common/setting_names.h"

#include <atomic>

namespace mcp {
namespace {

std::atomic<SettingSpelling> g_spelling{nullptr};

}  // namespace

void use_setting_spelling(SettingSpelling spelling) { g_spelling.store(spelling); }

std::string setting_words(Setting s) {
  switch (s) {
    case Setting::kRingbufSize: return "the ring buffer size";
    case Setting::kTenantQuota: return "tenant quota";
    case Setting::kTraceIdArg: return "trace id argument";
    case Setting::kTlsClientCert: return "a client certificate and its key";
    case Setting::kBrokers: return "the broker list";
    case Setting::kUprobe: return "uprobe";
    case Setting::kPodNames: return "pod names";
  }
  return "setting";
}

std::string setting_name(Setting s) {
  const SettingSpelling spelling = g_spelling.load();
  return spelling ? spelling(s) : setting_words(s);
}

}  // namespace mcp
