#include "cgroup/cgroup2.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/error.h"

namespace mcp::cgroup {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string_view oct = s.substr(i + 1, 3);
      int v = 0;
      const auto [ptr, ec] = std::from_chars(oct.data(), oct.data() + 3, v, 8);
      if (ec == std::errc() && ptr == oct.data() + 3) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

std::filesystem::path find_cgroup2_mount(const std::filesystem::path& mountinfo) {
  std::ifstream in(mountinfo);
  if (!in) throw runtime_error("cannot read " + mountinfo.string());
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mount-point options [optional...] - fstype source super-options
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string word; fields >> word;) f.push_back(word);
    for (std::size_t i = 6; i + 1 < f.size() && f.size() > 4; ++i) {
      if (f[i] == "-") {
        if (f[i + 1] == "cgroup2") return unescape_mountinfo(f[4]);
        break;
      }
    }
  }
  throw runtime_error("no cgroup2 mount in " + mountinfo.string());
}

namespace {

// "/kubepods.slice/..." as /proc/PID/cgroup writes it is relative to the cgroup2
// mount; a path already under the mount is taken as it is.
std::filesystem::path under_mount(std::string_view path, const std::filesystem::path& cgroup2_root) {
  std::filesystem::path p(path);
  const auto [root_end, p_it] = std::mismatch(cgroup2_root.begin(), cgroup2_root.end(), p.begin(), p.end());
  if (p.is_relative() || root_end != cgroup2_root.end()) p = cgroup2_root / p.relative_path();
  return p.lexically_normal();
}

}  // namespace

uint32_t cgroup_depth(std::string_view path, const std::filesystem::path& cgroup2_root) {
  uint32_t depth = 0;
  for (const auto& part : under_mount(path, cgroup2_root).lexically_relative(cgroup2_root.lexically_normal()))
    if (!part.empty() && part != ".") depth++;
  return depth;
}

int open_cgroup_by_id(uint64_t id, const std::filesystem::path& cgroup2_root) {
  const int root = ::open(cgroup2_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) throw runtime_error("cannot open " + cgroup2_root.string() + ": " + std::strerror(errno));
  struct {
    file_handle h;
    unsigned char id[8];
  } handle{};
  handle.h.handle_bytes = sizeof(id);
  handle.h.handle_type = 0xfe;  // FILEID_KERNFS: the cgroup's 64-bit id
  std::memcpy(handle.h.f_handle, &id, sizeof(id));
  const int fd = open_by_handle_at(root, &handle.h, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int err = errno;
  ::close(root);
  if (fd < 0) throw runtime_error("cannot open cgroup id " + std::to_string(id) + ": " + std::strerror(err));
  return fd;
}

uint64_t resolve_cgroup_id(std::string_view path, const std::filesystem::path& cgroup2_root) {
  if (path.empty()) throw usage_error("empty cgroup path");
  const std::filesystem::path p = under_mount(path, cgroup2_root);
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw usage_error("cgroup '" + std::string(path) + "': no such directory (" + p.string() + ")");
  }
  // Every cgroup directory has cgroup.procs; this catches paths outside the cgroup tree.
  struct stat procs {};
  if (::stat((p / "cgroup.procs").c_str(), &procs) != 0) {
    throw usage_error("cgroup '" + std::string(path) + "': " + p.string() + " is not a cgroup");
  }
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace mcp::cgroup
