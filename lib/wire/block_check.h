// The one check of an untrusted EventBlock (from an agent, a broker, a journal or a spool file):
// after it passes, a reader of the block reads nothing out of range and meets no unknown kind.
//
// Checked: strings[0] == "" and pair_sets[0] empty when present (index 0 always means unset,
// even in an empty dictionary); every pair set has as many keys as values, each a string index
// in range; every event has a known kind, every string and pair-set index in range, at most 6
// args, at most 3 CUDA grid and block values, and a non-zero threshold (probability 0 would
// weigh infinitely). UTF-8 of the strings is guaranteed by proto3 parsing.
// The error names the event or pair set and the field: "event 3: comm index 1000 out of range".
#pragma once
#include <optional>
#include <string>

#include "mcp/v1/sampling.pb.h"

namespace mcp::wire {

struct BlockError {
  std::string reason;
};

std::optional<BlockError> check_block(const mcp::v1::EventBlock& block);

// Index `index` of the block's string dictionary; "" for 0 and, for an unchecked block, for an
// index out of range.
const std::string& block_string(const mcp::v1::EventBlock& block, uint32_t index);

}  // namespace mcp::wire
