// Test support: files. read a whole file (slurp), write one, and a scratch directory
// under /tmp removed with everything in it when the TempDir goes. Header-only; every tier
// and the benches use these instead of their own copies.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mcp::test {

// The whole file; empty when it cannot be read.
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `path` with every symlink resolved; `path` itself when it does not exist.
inline std::string real_path(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::canonical(path, ec);
  return ec ? path : p.string();
}

// This test binary's own file.
inline std::string self_exe() { return real_path("/proc/self/exe"); }

// Creates or truncates `path`.
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "mcp-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `name` in the directory; returns its path.
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    write_file(path_ / name, text);
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace mcp::test
