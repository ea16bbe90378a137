// Fuzz entry points shared by the libFuzzer binaries (built with clang) and the replay test
// (always built): each takes arbitrary bytes and must never crash, hang or leak, whatever
// the input. Errors in the input are expected and swallowed (RulesError / ConfigError).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mcp::fuzz {

// Compiles the bytes as compliance rules; when they compile, evaluates and applies them to
// a fixed event and renders an audit record.
int rules_one_input(const uint8_t* data, size_t size);

// Parses the bytes as agent.yaml (no base directory, so `compliance.file` only reads what a
// relative path reaches from the working directory).
int config_one_input(const uint8_t* data, size_t size);

// The broker's Publish path after gRPC: the bytes are one AgentMessage as it arrives on the
// wire; scan_agent_message (bounds, before parsing) -> parse -> check_agent_id / check_hello /
// check_batch -> for Batch.events: parse_event_block, block <-> samples, filter_block -> DedupTable admission -> journal append (an in-memory SegmentLog) -> read back. Beyond not
// crashing it traps when an invariant breaks: a scan that passed but a parse holding more samples
// than the bound, or a stored packet that does not read back equal.
int publish_one_input(const uint8_t* data, size_t size);
// True when publish_one_input's checks would let the message through to the store (seeds not
// named bad_* must be).
bool publish_input_valid(const uint8_t* data, size_t size);

}  // namespace mcp::fuzz
