// DedupTable: per (agent id, incarnation), the high-water mark of stored batch sequences, and per
// agent id the credential it is bound to. An agent counts its sequences within an incarnation
// (its spool's id, Hello.incarnation) and replays unacknowledged batches in order, so
// "sequence <= mark" identifies a replay whose ack was lost; an agent that lost its spool comes
// back under a new incarnation and counts from 1 again, shadowed by nothing it sent before.
//
// Poisoning guards (issues 14 and 29): an id is bound to the credential that first published it
// (a token's or client certificate's identity, see access.h; "" when the broker has no
// authentication). An incarnation's first sequence must be at most kSequenceWindow (spools count
// from 1) and a later one may not jump more than kSequenceWindow past its mark, so a forged
// batch can neither start a count high nor walk one far. Incarnation 0 is an older agent whose
// sequences came from its clock in µs: its bound is max(mark + window, now_us + 1 h). Each agent
// keeps its kMaxIncarnations most recently used incarnations (an older one is a spool long gone).
// Eviction (issue 51, finding 5): 20 incarnations sent under another agent's id pushed its marks
// out, and its replay of acked batches was stored twice. Marks are only ever created or evicted
// by the credential the id is bound to (any other is kForeignCredential before anything is
// recorded), and where publishers share one credential (no authentication, one token for all) a
// new incarnation may evict only one unused for kIncarnationIdleUs: while all are in use it is
// kIncarnationsInUse. A real agent makes a new incarnation only when it lost its spool.
// check() only decides; record() is called once the batch is stored.
// An agent id unseen for longer than expire()'s `idle` is forgotten, marks and binding (nodes
// come and go: 10,000 ids once lived forever). Only an agent that comes back after that with a
// batch whose ack it lost can then store it twice.
//
// Persisted as JSON {agent: {"credential": ID, "sequence": N (incarnation 0),
// "incarnations": {HEX: N}, "seen": UNIX_SECONDS}} by persist() (write-to-temp + rename), plus an append-only
// FILE.bindings of the credential bindings made since (one JSON line each), so binding 10,000
// new ids costs 10,000 short appends, not 10,000 rewrites of a growing file. An older file
// ({agent: N} or {agent: {"sequence": N}}) loads as incarnation-0 marks. An empty path keeps
// everything in memory.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "clock/clock_source.h"

namespace mcp::broker {

inline constexpr uint64_t kSequenceWindow = uint64_t{1} << 32;
inline constexpr uint64_t kClockAllowanceUs = uint64_t{3600} * 1000000;  // agent clock ahead by 1 h
inline constexpr size_t kMaxIncarnations = 16;
inline constexpr uint64_t kIncarnationIdleUs = uint64_t{600} * 1000000;  // 10 min

// The clock every `now_us` below counts in: `clock`'s wall time, µs since the epoch.
inline uint64_t unix_us(clock::ClockSource& clock) { return static_cast<uint64_t>(clock.realtime_ns() / 1000); }

enum class Admission {
  kNew,                // store it, then record()
  kDuplicate,          // at or below the mark: ack as duplicate, do not store
  kForeignCredential,  // the id is bound to another credential: PERMISSION_DENIED
  kBeyondWindow,       // sequence starts or jumps too far: INVALID_ARGUMENT
  kIncarnationsInUse,  // a new incarnation, and all kMaxIncarnations used recently: FAILED_PRECONDITION
};

class DedupTable {
 public:
  // Every `now_us` below is wall-clock microseconds since the epoch, read by the caller from its
  // clock (BrokerOptions::clock), so tests can drive expiry with a simulated one.
  // In memory: nothing to load.
  DedupTable() = default;
  // Loads the file (and its bindings) when it exists; an id loaded without "seen" counts as seen
  // at `now_us`. Throws mcp::Error (runtime) when it is unreadable JSON.
  DedupTable(std::filesystem::path file, uint64_t now_us);

  Admission check(const std::string& agent, uint64_t incarnation, const std::string& credential,
                  uint64_t sequence, uint64_t now_us) const;
  // Advances the mark (never lowers it) and binds an unbound id to `credential`, appending the
  // binding to FILE.bindings at once. True when that made a binding.
  bool record(const std::string& agent, uint64_t incarnation, const std::string& credential,
              uint64_t sequence, uint64_t now_us);
  // Start-up repair from the journal, which does not hold credentials: advances the mark only.
  void advance(const std::string& agent, uint64_t incarnation, uint64_t sequence, uint64_t now_us);
  // Forgets every agent id last recorded more than `idle` before `now_us`; 0 keeps them all.
  // Returns how many went. An id loaded from a file without "seen" counts from the load.
  size_t expire(uint64_t now_us, std::chrono::seconds idle);
  size_t agents() const { return agents_.size(); }

  uint64_t high_water(const std::string& agent, uint64_t incarnation) const;
  std::string credential(const std::string& agent) const;
  // Writes every mark and binding, then empties FILE.bindings; throws mcp::Error (runtime) on
  // I/O failure.
  void persist() const;

 private:
  struct Count {
    uint64_t sequence = 0;
    uint64_t used = 0;  // tick of the last record(): the least recent is evicted
    uint64_t used_us = 0;  // when, on the now_us clock
  };
  struct Agent {
    std::string credential;  // "" : not bound yet
    std::map<uint64_t, Count> incarnations;
    uint64_t seen_s = 0;     // unix seconds of the last record() (0: not yet)
  };
  Count& count_of(const std::string& agent, uint64_t incarnation, uint64_t now_us);
  void append_binding(const std::string& agent, const std::string& credential) const;

  std::filesystem::path file_;
  std::map<std::string, Agent> agents_;
  uint64_t tick_ = 0;
};

}  // namespace mcp::broker
