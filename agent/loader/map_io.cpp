#include "loader/map_io.h"

#include <bpf/bpf.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace mcp::loader {

int MapIo::update(int map_fd, const void* key, const void* value, uint64_t flags) const {
  return bpf_map_update_elem(map_fd, key, value, flags);
}

int MapIo::lookup(int map_fd, const void* key, void* value) const { return bpf_map_lookup_elem(map_fd, key, value); }

int MapIo::erase(int map_fd, const void* key) const { return bpf_map_delete_elem(map_fd, key); }

void MapFailures::report(std::string_view map, std::string_view what, int err) {
  const uint64_t n = count_.fetch_add(1, std::memory_order_relaxed) + 1;
  bool first;
  {
    std::lock_guard lock(mu_);
    first = logged_.emplace(map).second;
  }
  // A map that fails once usually fails again (full, or the kernel refusing): one line at warn.
  spdlog::log(first ? spdlog::level::warn : spdlog::level::debug,
              "BPF map {}: {}{} ({} map failures so far: mcp_bpf_map_failures_total)", map, what,
              err ? ": " + errno_text(err) : std::string(), n);
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace mcp::loader
