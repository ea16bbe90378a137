#include "forward/agent_id.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include <fmt/format.h>

#include "common/error.h"
#include "common/safe_file.h"

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
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))  // a spool directory: owner only
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  // Root reads and writes here: not in a directory others could plant links in, and never
  // through a link (common/safe_file.h); a link at agent-id would send another file's first line.
  const SafeDir safe(dir, "agent id");
  const auto path = dir / "agent-id";
  const auto stored = [&] {
    std::string text;
    const int fd = safe.open("agent-id", O_RDONLY);
    if (fd < 0 && errno != ENOENT)
      throw runtime_error("cannot read the agent id in " + path.string() + ": " + open_error_text(errno));
    if (fd >= 0) {
      read_whole(fd, &text);
      ::close(fd);
    }
    return text.substr(0, text.find('\n'));
  };
  if (std::string id = stored(); !id.empty()) return id;
  const std::string id = fmt::format("{}-{:016x}", host_name(), random64());
  // Created whole or not at all; if another start won the race, its id is kept.
  if (!safe.create("agent-id", id + "\n") && errno != EEXIST)
    throw runtime_error("cannot store the agent id in " + path.string() + ": " + open_error_text(errno));
  const std::string kept = stored();
  return kept.empty() ? id : kept;
}

}  // namespace mcp
