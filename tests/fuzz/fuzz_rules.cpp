// libFuzzer target for the compliance rules compiler and evaluator.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mcp::fuzz::rules_one_input(data, size);
}
