// UTF-8 validation and repair for strings that come from traced processes (comm, file paths,
// CUDA kernel names, tags). Protobuf `string` fields and JSON text must be valid UTF-8, and a
// traced process chooses these bytes, so every encoder goes through this one helper.
// Valid means RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF (what
// protobuf's parser accepts). Each byte that does not start a valid sequence becomes U+FFFD.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace mcp {

// Length of the valid UTF-8 sequence starting at s[i] (1 for ASCII), or 0 when it is invalid.
size_t utf8_sequence_length(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// Appends s with every invalid byte replaced by U+FFFD (EF BF BD).
void append_valid_utf8(std::string& out, std::string_view s);

// s itself when it is valid (the common case costs one scan), else the repaired copy.
std::string valid_utf8(std::string_view s);

}  // namespace mcp
