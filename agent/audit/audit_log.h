// AuditLog: what the compliance rules decided (exempt, redact, audit.trace clauses) as an
// append-only JSON-lines trail, chained with a key, that an auditor can check (`mcp-agent
// audit verify`). One record per event a rule exempted, redacted or tagged with clauses:
//   {"seq":N,"ts_ns":..,"node":..,"probe":..,"pid":..,"comm":..,"service":..,
//    "rules":[{"rule":..,"when":..,"clauses":[..]}],"exempt":bool,"redacted":["args[1]",..],
//    "prev":"<mac of the record before>","mac":"<HMAC-SHA256(key, this line without its mac)>"}
// It names what was removed, never the removed values. The first record's prev is 64 zeros;
// the first record of a rotated file chains to the previous file's last, so the files read in
// name order are one chain. A plain hash chain can be recomputed by whoever edits the files;
// the MAC cannot without the key (KEY, default `<dir>.key`, 32 random bytes as hex, created
// 0600 on first start, outside the directory so that shipping the trail does not ship it).
// Files: DIR/audit-<first seq, 12 digits>.jsonl, a new one when the current passes max_bytes
// or max_age; with max_files, the oldest beyond it are removed at rotation.
// A chain alone cannot show what was cut from its ends, so DIR/audit.seal holds a MAC'd
// checkpoint of the head and tail (Seal below), rewritten at start, at each rotation, every
// seal_every records and at a clean exit: verify fails when the trail ends before the seal's
// last record, starts anywhere but the seal's first, or lacks a file the seal names. What is
// cut after the last seal (at most seal_every - 1 records, after a crash) cannot be told.
// A restart continues the chain (a torn last line, never completed, is cut off first) and
// refuses to start on a tail that its key or the seal disown.
// Records are written with one write(2) before the event reaches any sink; a write that fails
// (a full disk) is rolled back so the chain stays whole, logged (rate-limited), reported by
// health_problem() until a write succeeds again, and record() returns false: the caller must
// not export the event (fail closed). Thread-safe.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string_view>
#include <string>
#include <vector>

#include "common/event.h"
#include "common/safe_file.h"
#include "rules/ruleset.h"

namespace mcp::audit {

struct AuditOptions {
  std::filesystem::path dir;
  uint64_t max_bytes = 64ull << 20;                 // rotate past this size
  std::chrono::seconds max_age = std::chrono::hours(24);  // rotate after this long
  std::string node;                                 // the agent id or host name in each record
  std::filesystem::path key_file;                   // empty: default_key_file(dir)
  uint32_t max_files = 0;                           // keep at most this many files (0: all)
  uint32_t seal_every = 100;                        // records between seals (and syncs)
  bool operator==(const AuditOptions&) const = default;
};

using Key = std::array<unsigned char, 32>;

// `<dir>.key`: beside the trail's directory, not in it.
std::filesystem::path default_key_file(const std::filesystem::path& dir);
// The key in `file` (64 hex digits). Throws mcp::Error (runtime) naming the file.
Key read_key(const std::filesystem::path& file);
// DIR/audit.seal.
std::filesystem::path seal_file(const std::filesystem::path& dir);

// The MAC (hex) a record line carries: of the line with its "mac" field taken out.
std::string record_mac(const Key& key, std::string_view line_without_mac);

// The checkpoint in DIR/audit.seal, one JSON line with these fields and its own "mac".
struct Seal {
  uint64_t first_seq = 1;   // the first record kept (past 1 once max_files removed older files)
  std::string first_prev;   // that record's prev: 64 zeros at seq 1
  uint64_t last_seq = 0;    // the last record written when sealed (0: none yet)
  std::string last_mac;     // its MAC (64 zeros when none)
  std::string last_file;    // the newest file's name
  uint64_t files = 0;       // how many files the trail had
  uint64_t ts_ns = 0;       // wall clock when sealed
};

class AuditLog {
 public:
  // Creates `dir` (0700) and the key when missing and continues the chain. Throws mcp::Error
  // (runtime) when the trail's tail does not match its key or seal, or the key is missing
  // for a trail that has records.
  explicit AuditLog(AuditOptions options);
  ~AuditLog();  // seals
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Writes a record when a fired rule exempts, redacts or names clauses; else nothing. False
  // when the record could not be written: `event` must not be exported, and unless the rules
  // drop it anyway it is counted in dropped_events().
  bool record(const rules::RuleSet& rules, const rules::Decision& decision, const Event& event);
  // Called with each record once it is written (under the log's lock, in chain order; `line`
  // without its newline; `mac` its MAC): the OTLP export of the trail. It must not block.
  using Observer = std::function<void(uint64_t seq, uint64_t ts_ns, const std::string& mac, std::string_view line)>;
  void set_observer(Observer observer);

  uint64_t records() const;         // written by this process
  uint64_t failures() const;        // records that could not be written
  uint64_t dropped_events() const;  // events not exported because their record was not written
  // Empty while records and the seal are written; else why not (for /healthz).
  std::string health_problem() const;
  std::filesystem::path current_file() const;

 private:
  std::string open_next(bool continue_newest);  // empty, or why not
  int write_line(const std::string& line);        // 0, or the errno
  bool prune();                                   // true when it sealed
  void write_seal(uint64_t files = 0);            // 0: count them
  // The error slots behind health_problem(), and the rate-limited log.
  void failed(std::string& slot, std::string what);
  void succeeded(std::string& slot);

  AuditOptions options_;
  SafeDir dir_;  // options_.dir, checked once: files are opened and the seal replaced through it
  Key key_{};
  mutable std::mutex mu_;
  int fd_ = -1;
  std::filesystem::path file_;
  uint64_t file_bytes_ = 0;
  std::chrono::steady_clock::time_point opened_;
  uint64_t seq_ = 0;       // of the last record in the chain
  std::string last_mac_;   // of the last record in the chain
  uint64_t first_seq_ = 1;  // the seal's head
  std::string first_prev_;
  uint64_t unsealed_ = 0;  // records since the last seal
  uint64_t records_ = 0, failures_ = 0, dropped_ = 0;
  std::string write_error_, seal_error_;  // the last failure's words, until a write succeeds
  std::chrono::steady_clock::time_point said_;  // the last error logged (rate limit)
  Observer observer_;
};

// The trail's files in `dir` (audit-*.jsonl), in name order: the chain's order.
std::vector<std::filesystem::path> trail_files(const std::filesystem::path& dir);

struct VerifyResult {
  bool ok = false;
  uint64_t records = 0;
  uint64_t first_seq = 0;  // the chain checked starts there (1 unless max_files removed files)
  uint64_t unsealed = 0;   // records after the seal's last (the writer did not exit cleanly)
  std::string where;   // "FILE:LINE" of the first bad record, or the file missing or unreadable
  std::string reason;  // why it is bad
};
// Checks `files` (in name order) as one chain under `key` and against the seal in `seal`:
// each record's MAC, seq one more than the one before, prev equal to the MAC before, the
// first record the seal's first, no file the seal names missing, nothing sealed cut off.
// Never throws on bad content.
VerifyResult verify_trail(const std::vector<std::filesystem::path>& files, const std::filesystem::path& seal,
                          const Key& key);

}  // namespace mcp::audit
