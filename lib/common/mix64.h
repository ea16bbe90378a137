// SplitMix64's finaliser: a cheap bijection on 64 bits whose output bits each depend on every
// input bit, for turning ids (event ids, clock stamps) into uniform draws and made-up ids.
#pragma once
#include <cstdint>

namespace mcp {

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mcp
