#include "audit/audit_command.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "audit/audit_log.h"
#include "common/error.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

int verify(const std::vector<std::string>& args) {
  std::vector<fs::path> files;
  for (const auto& a : args) {
    std::error_code ec;
    if (!fs::is_directory(a, ec)) {
      files.emplace_back(a);
      continue;
    }
    const auto in_dir = trail_files(a);
    if (in_dir.empty()) throw usage_error("audit verify: " + a + " holds no audit-*.jsonl file");
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  const VerifyResult r = verify_chain(files);
  if (!r.ok) {
    std::fprintf(stderr, "mcp-agent: audit verify: %s: %s (%llu records before it are good)\n", r.where.c_str(),
                 r.reason.c_str(), static_cast<unsigned long long>(r.records));
    return 1;
  }
  std::printf("ok: %llu records in %zu file(s), seq %llu..%llu, chain unbroken\n",
              static_cast<unsigned long long>(r.records), files.size(), static_cast<unsigned long long>(r.first_seq),
              static_cast<unsigned long long>(r.records ? r.first_seq + r.records - 1 : 0));
  return 0;
}

}  // namespace

void add_audit_command(CLI::App& app, CommandAction& action) {
  auto* cmd = app.add_subcommand("audit", "Check the compliance audit trail");
  cmd->require_subcommand(1);
  auto files = std::make_shared<std::vector<std::string>>();
  auto* v = cmd->add_subcommand("verify", "Prove an audit trail's hash chain unbroken, or name its first bad record");
  v->add_option("files", *files, "audit-*.jsonl files in order, or the directory holding them")->required();
  v->callback([files, &action] { action = [files] { return verify(*files); }; });
}

}  // namespace mcp::audit
