// AuditLog: what the compliance rules decided (exempt, redact, audit.trace clauses) as an
// append-only, hash-chained JSON-lines trail that an auditor can check (`mcp-agent audit
// verify`). One record per event a rule exempted, redacted or tagged with clauses:
//   {"seq":N,"ts_ns":..,"node":..,"probe":..,"pid":..,"comm":..,"service":..,
//    "rules":[{"rule":..,"when":..,"clauses":[..]}],"exempt":bool,"redacted":["args[1]",..],
//    "prev":"<hash of the record before>","hash":"<SHA-256 of this line without its hash>"}
// It names what was removed, never the removed values. The first record's prev is 64 zeros;
// the first record of a rotated file chains to the previous file's last, so the files read in
// name order are one chain. Files: DIR/audit-<first seq, 12 digits>.jsonl, a new one when the
// current passes max_bytes or max_age. A restart continues the chain (a torn last line, never
// completed, is cut off first). Records are written with one write(2) before the event reaches
// any sink; a write that fails (a full disk) is counted in failures(), rolled back so the chain
// stays whole, and never holds the event up. Thread-safe.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string_view>
#include <string>
#include <vector>

#include "common/event.h"
#include "rules/ruleset.h"

namespace mcp::audit {

struct AuditOptions {
  std::filesystem::path dir;
  uint64_t max_bytes = 64ull << 20;                 // rotate past this size
  std::chrono::seconds max_age = std::chrono::hours(24);  // rotate after this long
  std::string node;                                 // the agent id or host name in each record
  bool operator==(const AuditOptions&) const = default;
};

class AuditLog {
 public:
  // Creates `dir` (0700) when missing and continues its chain. Throws mcp::Error (runtime).
  explicit AuditLog(AuditOptions options);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Writes a record when a fired rule exempts, redacts or names clauses; else nothing.
  void record(const rules::RuleSet& rules, const rules::Decision& decision, const Event& event);
  // Called with each record once it is written (under the log's lock, in chain order; `line`
  // without its newline): the OTLP export of the trail. It must not block.
  using Observer = std::function<void(uint64_t seq, uint64_t ts_ns, const std::string& hash, std::string_view line)>;
  void set_observer(Observer observer);

  uint64_t records() const;   // written by this process
  uint64_t failures() const;  // records that could not be written
  std::filesystem::path current_file() const;

 private:
  void open_next(bool continue_newest);
  bool write_line(const std::string& line);

  AuditOptions options_;
  mutable std::mutex mu_;
  int fd_ = -1;
  std::filesystem::path file_;
  uint64_t file_bytes_ = 0;
  std::chrono::steady_clock::time_point opened_;
  uint64_t seq_ = 0;        // of the last record in the chain
  std::string last_hash_;  // of the last record in the chain
  uint64_t records_ = 0, failures_ = 0;
  Observer observer_;
};

// The SHA-256 (hex) a record line carries: of the line with its "hash" field taken out.
std::string record_hash(std::string_view line_without_hash);

// The trail's files in `dir` (audit-*.jsonl), in name order: the chain's order.
std::vector<std::filesystem::path> trail_files(const std::filesystem::path& dir);

struct VerifyResult {
  bool ok = false;
  uint64_t records = 0;
  uint64_t first_seq = 0;  // the chain checked starts there (1 unless older files were removed)
  std::string where;   // "FILE:LINE" of the first bad record
  std::string reason;  // why it is bad
};
// Checks `files` (in name order) as one chain: each record's own hash, seq one more than the
// one before, prev equal to the hash before. Never throws on bad content.
VerifyResult verify_chain(const std::vector<std::filesystem::path>& files);

}  // namespace mcp::audit
