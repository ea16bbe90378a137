// Test support: a bounded wait for a condition another thread or process makes true
// (deadline-bounded polling of the condition itself, never a sleep standing in for it).
// The limit is far beyond any expected latency: assertions are on the outcome, never on
// the time it took. Header-only.
#pragma once
#include <chrono>
#include <functional>
#include <thread>

namespace mcp::test {

inline bool eventually(const std::function<bool()>& cond,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

}  // namespace mcp::test
