#include "commands/audit.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "audit/audit_log.h"
#include "common/error.h"

namespace mcp::commands {
using namespace mcp::audit;  // the audit library this command fronts
namespace {

namespace fs = std::filesystem;

struct VerifyFlags {
  std::vector<std::string> paths;
  std::string key;
  std::string seal;
};

int verify(const VerifyFlags& flags) {
  std::vector<fs::path> files;
  fs::path seal = flags.seal;
  for (const auto& a : flags.paths) {
    std::error_code ec;
    const bool is_dir = fs::is_directory(a, ec);
    if (seal.empty()) seal = seal_file(is_dir ? fs::path(a) : fs::path(a).parent_path());
    if (!is_dir) {
      files.emplace_back(a);
      continue;
    }
    const auto in_dir = trail_files(a);  // none: the seal says whether that is right
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  const VerifyResult r = verify_trail(files, seal, read_key(flags.key));
  if (!r.ok) {
    std::fprintf(stderr, "mcp-agent: audit verify: %s: %s (%llu records before it are good)\n", r.where.c_str(),
                 r.reason.c_str(), static_cast<unsigned long long>(r.records));
    return 1;
  }
  if (r.records == 0) {
    std::printf("ok: 0 records in %zu file(s), as the seal says\n", files.size());
    return 0;
  }
  std::printf("ok: %llu records in %zu file(s), seq %llu..%llu, chain unbroken and sealed",
              static_cast<unsigned long long>(r.records), files.size(), static_cast<unsigned long long>(r.first_seq),
              static_cast<unsigned long long>(r.first_seq + r.records - 1));
  // Authentic, but what followed them could have been cut unseen: said, not failed.
  if (r.unsealed) std::printf(" (the last %llu after the seal: the writer did not exit cleanly)", static_cast<unsigned long long>(r.unsealed));
  std::printf("\n");
  return 0;
}

}  // namespace

void add_audit_command(CLI::App& app, CommandAction& action) {
  auto* cmd = app.add_subcommand("audit", "Check the compliance audit trail");
  cmd->require_subcommand(1);
  auto flags = std::make_shared<VerifyFlags>();
  auto* v = cmd->add_subcommand("verify", "Prove an audit trail whole under its key and seal, or name its first bad record");
  v->add_option("--key", flags->key, "The trail's key file (compliance.audit_log.key; default at the writer: DIR.key)")->required();
  v->add_option("--seal", flags->seal, "The trail's seal (default: DIR/audit.seal)");
  v->add_option("files", flags->paths, "audit-*.jsonl files in order, or the directory holding them")->required();
  v->callback([flags, &action] { action = [flags] { return verify(*flags); }; });
}

}  // namespace mcp::commands
