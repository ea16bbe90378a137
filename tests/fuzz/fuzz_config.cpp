// libFuzzer target for the agent.yaml loader.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mcp::fuzz::config_one_input(data, size);
}
