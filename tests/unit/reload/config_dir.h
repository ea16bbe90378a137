// Test helpers: a temporary directory laid out like a kubelet-mounted ConfigMap, and a
// bounded wait for a condition another thread makes true.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace mcp::reload::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/mcp-reload-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
}

// Reproduces the kubelet's AtomicWriter: the data lives in a timestamped directory,
// `..data` points at it, and `agent.yaml -> ..data/agent.yaml` never changes. An update
// writes a new timestamped directory, points `..data_tmp` at it, renames `..data_tmp` over
// `..data` (the atomic step) and removes the old directory.
class ConfigMapDir {
 public:
  explicit ConfigMapDir(const fs::path& root) : root_(root) {}

  fs::path config_path() const { return root_ / "agent.yaml"; }

  void update(const std::string& text) {
    const std::string ts = "..2026_12_02_10_00_0" + std::to_string(generation_++) + ".123456789";
    fs::create_directory(root_ / ts);
    write_file(root_ / ts / "agent.yaml", text);
    fs::create_symlink(ts, root_ / "..data_tmp");
    fs::rename(root_ / "..data_tmp", root_ / "..data");
    if (!fs::exists(config_path(), ec_) && !fs::is_symlink(config_path()))
      fs::create_symlink("..data/agent.yaml", config_path());
    if (!previous_.empty()) fs::remove_all(root_ / previous_);
    previous_ = ts;
  }

 private:
  fs::path root_;
  std::string previous_;
  int generation_ = 0;
  std::error_code ec_;
};

// Waits up to 10 s (far beyond any expected latency; the assertion is on the outcome,
// never on the time it took).
inline bool eventually(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

inline std::string config_text(const std::string& node, double rate = 0.5) {
  return "node_name: " + node + "\nsyscalls:\n  - name: openat\n    sampling: {rate: " + std::to_string(rate) + "}\n";
}

}  // namespace mcp::reload::testing
