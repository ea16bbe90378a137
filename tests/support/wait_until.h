// wait_until: polls `cond` until it holds (true) or `limit` passes (false, after one last look).
// A deadline poll for state another thread or process changes and offers no signal to wait on.
#pragma once
#include <chrono>
#include <thread>

namespace mcp::test {

template <typename F>
bool wait_until(F cond, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace mcp::test
