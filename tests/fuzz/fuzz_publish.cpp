// libFuzzer target for the broker's Publish path (AgentMessage bytes -> checks -> store).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mcp::fuzz::publish_one_input(data, size);
}
