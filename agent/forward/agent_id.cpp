#include "forward/agent_id.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "common/error.h"

namespace mcp {
namespace {

uint64_t random64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "agent";
  return host;
}

std::string unique_agent_id() { return fmt::format("{}-{}-{:016x}", host_name(), getpid(), random64()); }

std::string stable_agent_id(const std::filesystem::path& dir) {
  const auto path = dir / "agent-id";
  {
    std::ifstream in(path);
    std::string id;
    if (in && std::getline(in, id) && !id.empty()) return id;
  }
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))  // a spool directory: owner only
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  const std::string id = fmt::format("{}-{:016x}", host_name(), random64());
  const auto tmp = dir / "agent-id.tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw runtime_error("cannot create " + tmp.string() + ": " + std::strerror(errno));
  const std::string line = id + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  // link() rather than rename(): if another start won the race, keep its id.
  if (!ok || (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw runtime_error("cannot store the agent id in " + path.string() + ": " + why);
  }
  ::unlink(tmp.c_str());
  std::ifstream in(path);
  std::string stored;
  std::getline(in, stored);
  return stored.empty() ? id : stored;
}

}  // namespace mcp
