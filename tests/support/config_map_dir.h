// Test support: a directory laid out like a kubelet-mounted ConfigMap volume, the way
// `run --config` meets agent.yaml in a pod. Header-only.
#pragma once
#include <filesystem>
#include <string>

#include "files.h"

namespace mcp::test {

// Reproduces the kubelet's AtomicWriter: the data lives in a timestamped directory,
// `..data` points at it, and `agent.yaml -> ..data/agent.yaml` never changes. An update
// writes a new timestamped directory, points `..data_tmp` at it, renames `..data_tmp` over
// `..data` (the atomic step) and removes the old directory.
class ConfigMapDir {
 public:
  explicit ConfigMapDir(const std::filesystem::path& root) : root_(root) { std::filesystem::create_directories(root_); }

  std::filesystem::path config_path() const { return root_ / "agent.yaml"; }

  void update(const std::string& text) {
    namespace fs = std::filesystem;
    const std::string ts = "..2026_12_02_10_00_0" + std::to_string(generation_++) + ".123456789";
    fs::create_directory(root_ / ts);
    write_file(root_ / ts / "agent.yaml", text);
    fs::create_symlink(ts, root_ / "..data_tmp");
    fs::rename(root_ / "..data_tmp", root_ / "..data");
    if (!fs::exists(fs::symlink_status(config_path()))) fs::create_symlink("..data/agent.yaml", config_path());
    if (!previous_.empty()) fs::remove_all(root_ / previous_);
    previous_ = ts;
  }

 private:
  std::filesystem::path root_;
  std::string previous_;
  int generation_ = 0;
};

}  // namespace mcp::test
