// The dictionaries of one EventBlock (proto/mcp/v1/sampling.proto): every distinct string and
// every distinct pair set is added once and named by its index; index 0 is "" and the empty set.
// Strings come from traced processes: each is repaired to valid UTF-8 (common/utf8.h) once, when
// it is first added, since one invalid byte in a proto3 string makes the whole block unparseable.
// A pair set is sorted by its (repaired) key strings, stably, so repeated keys keep their order.
// Blocks are self-contained: reset() starts a new block and forgets every index.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mcp/v1/sampling.pb.h"

namespace mcp::wire {

class Dictionary {
 public:
  // Writes into *block (which must outlive it), starting it afresh.
  explicit Dictionary(mcp::v1::EventBlock* block) : block_(block) { reset(); }
  Dictionary(const Dictionary&) = delete;
  Dictionary& operator=(const Dictionary&) = delete;

  // Clears the block and the dictionaries: strings[0] = "", pair_sets[0] = {}.
  void reset();
  uint32_t string(std::string_view raw);
  // Any range of (key, value) pairs of strings: a vector of pairs, a protobuf Map.
  template <class Pairs>
  uint32_t pairs(const Pairs& pairs) {
    if (pairs.empty()) return 0;
    scratch_.clear();
    for (const auto& [k, v] : pairs) add_scratch(k, v);
    return intern_scratch();
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Pair {
    uint32_t k, v;  // string indices
  };
  void add_scratch(std::string_view key, std::string_view value) { scratch_.push_back({string(key), string(value)}); }
  uint32_t intern_scratch();

  mcp::v1::EventBlock* block_;
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> strings_;    // raw bytes -> index
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> pair_sets_;  // index pairs -> set
  std::vector<Pair> scratch_;
  std::string scratch_key_;
};

}  // namespace mcp::wire
