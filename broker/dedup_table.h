// DedupTable: per agent id, the high-water mark of stored batch sequences and the credential
// the id is bound to. Agents send strictly increasing sequences and replay unacknowledged
// batches in order, so "sequence <= high-water mark" identifies a replay whose ack was lost.
//
// Poisoning guards (issue 14, item 7): an id is bound to the credential that first published
// it (a token's or client certificate's identity, see access.h; "" when the broker has no
// authentication), and a known agent's sequence may not jump past
//   max(mark + kSequenceWindow, now_us + kClockAllowanceUs)
// (the forwarder's sequences are spool offsets: max(previous + 1, the agent's clock in µs)), so
// one forged batch cannot silence an agent's later batches as "duplicates". A new id takes any
// non-zero sequence. check() only decides; record() is called once the batch is stored.
// Persisted as JSON {agent: {"sequence": N, "credential": ID}} (write-to-temp + rename; an older
// {agent: N} file loads as unbound marks), so a killed broker keeps both; an empty path keeps
// them in memory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace mcp::broker {

inline constexpr uint64_t kSequenceWindow = uint64_t{1} << 32;           // ~71 min of µs
inline constexpr uint64_t kClockAllowanceUs = uint64_t{3600} * 1000000;  // agent clock ahead by 1 h

enum class Admission {
  kNew,                // store it, then record()
  kDuplicate,          // at or below the mark: ack as duplicate, do not store
  kForeignCredential,  // the id is bound to another credential: PERMISSION_DENIED
  kBeyondWindow,       // sequence jumps too far: INVALID_ARGUMENT
};

class DedupTable {
 public:
  // Loads the file when it exists; throws mcp::Error (runtime) when it is unreadable JSON.
  explicit DedupTable(std::filesystem::path file = {});

  Admission check(const std::string& agent, const std::string& credential, uint64_t sequence,
                  uint64_t now_us) const;
  // Advances the mark (never lowers it) and binds an unbound id to `credential`. True when that
  // made a binding (a new id, or a first credential): the caller persists it at once.
  bool record(const std::string& agent, const std::string& credential, uint64_t sequence);
  // Start-up repair from the journal, which does not hold credentials: advances the mark only.
  void advance(const std::string& agent, uint64_t sequence);

  uint64_t high_water(const std::string& agent) const;
  std::string credential(const std::string& agent) const;
  // Writes the marks; throws mcp::Error (runtime) on I/O failure.
  void persist() const;

 private:
  struct Mark {
    uint64_t sequence = 0;
    std::string credential;  // "" : not bound yet
  };
  std::filesystem::path file_;
  std::map<std::string, Mark> marks_;
};

}  // namespace mcp::broker
