#include "config/file_trust.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

namespace mcp::config {
namespace {

bool read_only_mount(const std::filesystem::path& p) {
  struct statvfs v;
  return statvfs(p.c_str(), &v) == 0 && (v.f_flag & ST_RDONLY);
}

// Why `p` (stat()ed, symlinks followed) lets someone else change the configuration.
std::string check(const std::filesystem::path& p, bool directory) {
  struct stat st;
  if (stat(p.c_str(), &st) != 0) return {};  // reading it reports the problem
  if (read_only_mount(p)) return {};
  const char* what = directory ? "directory" : "file";
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return fmt::format("{} {} is owned by uid {}, not root or the agent's user (chown root)", what, p.string(),
                       st.st_uid);
  const bool sticky_dir = directory && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir)
    return fmt::format("{} {} is writable by group or others (mode {:04o}; chmod go-w)", what, p.string(),
                       st.st_mode & 07777);
  return {};
}

}  // namespace

std::string untrusted_reason(const std::filesystem::path& path) {
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);
  if (ec) return {};  // missing: reading it reports the problem
  std::string why = check(real, false);
  if (why.empty()) why = check(real.parent_path(), true);
  const auto given_dir = std::filesystem::absolute(path, ec).parent_path();
  if (why.empty() && !ec && given_dir != real.parent_path()) why = check(given_dir, true);
  if (why.empty()) return {};
  return "refusing to load a configuration others can change: " + why;
}

}  // namespace mcp::config
