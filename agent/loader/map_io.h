// MapIo: the element calls a session makes on its BPF maps (update, lookup, delete), behind
// one seam so a test can make any of them fail on a real kernel. Each returns 0, or non-zero
// with errno set, as libbpf's bpf_map_*_elem do (the default implementation calls those).
// MapFailures: the failures the session could not hand to a caller (a probe's removal, the
// window thread, a reader with no error channel): counted (mcp_bpf_map_failures_total) and
// logged, at warn the first time for each map, at debug after.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace mcp::loader {

class MapIo {
 public:
  virtual ~MapIo() = default;
  virtual int update(int map_fd, const void* key, const void* value, uint64_t flags) const;
  virtual int lookup(int map_fd, const void* key, void* value) const;
  virtual int erase(int map_fd, const void* key) const;
};

class MapFailures {
 public:
  // One failure on map `map`: `what` says what was lost ("cannot write probe 3's configuration"),
  // err is the errno (0: `what` says why).
  void report(std::string_view map, std::string_view what, int err);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
  std::mutex mu_;
  std::set<std::string, std::less<>> logged_;  // maps whose first failure was logged at warn
};

// strerror of an errno (either sign).
std::string errno_text(int err);

}  // namespace mcp::loader
