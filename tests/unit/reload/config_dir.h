// Test helpers of the reload tests: the shared scratch directory and ConfigMap layout
// (tests/support), a bounded wait for a condition another thread makes true, and a config.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "../../support/config_map_dir.h"
#include "../../support/files.h"
#include "../../support/wait_until.h"

namespace mcp::reload::testing {

namespace fs = std::filesystem;

using mcp::test::ConfigMapDir;
using mcp::test::wait_until;
using mcp::test::TempDir;
using mcp::test::write_file;

inline std::string config_text(const std::string& node, double rate = 0.5) {
  return "node_name: " + node + "\nsyscalls:\n  - name: openat\n    sampling: {rate: " + std::to_string(rate) + "}\n";
}

}  // namespace mcp::reload::testing
