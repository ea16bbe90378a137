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

}  // namespace mcp::fuzz
