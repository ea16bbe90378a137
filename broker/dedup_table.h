// DedupTable: per-agent high-water mark of accepted batch sequences. Agents send strictly
// increasing sequences and replay unacknowledged batches in order, so "sequence <= high-water
// mark" identifies a replay whose ack was lost. Persisted as JSON (agent id -> sequence) with
// write-to-temp + rename, so a killed broker keeps its marks; an empty path keeps them in memory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace mcp::broker {

class DedupTable {
 public:
  // Loads the file when it exists; throws mcp::Error (runtime) when it is unreadable JSON.
  explicit DedupTable(std::filesystem::path file = {});

  // True (and the mark advances) when `sequence` is new for `agent`.
  bool accept(const std::string& agent, uint64_t sequence);
  uint64_t high_water(const std::string& agent) const;
  // Writes the marks; throws mcp::Error (runtime) on I/O failure.
  void persist() const;

 private:
  std::filesystem::path file_;
  std::map<std::string, uint64_t> marks_;
};

}  // namespace mcp::broker
