#include "loader/proc_maps.h"

#include <sys/sysmacros.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace mcp::loader {

std::vector<Mapping> parse_proc_maps(const std::string& text) {
  std::vector<Mapping> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long start, end, offset, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8] = {};
    int path_pos = -1;
    // start-end perms offset major:minor inode path
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset, &major, &minor,
                    &inode, &path_pos) < 7 || path_pos < 0)
      continue;
    std::string path = line.substr(static_cast<size_t>(path_pos));
    if (path.empty() || path[0] != '/') continue;
    if (auto d = path.find(" (deleted)"); d != std::string::npos) path.resize(d);
    out.push_back({start, end, offset, perms[2] == 'x', std::move(path), makedev(major, minor), inode});
  }
  return out;
}

std::vector<Mapping> read_proc_maps(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_proc_maps(ss.str());
}

}  // namespace mcp::loader
