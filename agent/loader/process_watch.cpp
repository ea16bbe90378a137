// What the kernel side traces: the process tree (seeded from /proc, then followed by the fork
// and exit programs) and, for CUDA discovery, the libraries traced processes map.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_handle.h"
#include "loader/bpf_session.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {
namespace {

using DirHandle = UniqueHandle<DIR*, closedir>;

}  // namespace

void BpfSession::track_process_tree() {
  // The exit program also counts kept syscalls that never returned (exit_group): always on.
  if (target_tgid_ <= 0) {
    if (bpf_link* link = bpf_program__attach(skel()->progs.mcp_process_exit)) process_links_.emplace_back(link);
    else throw runtime_error(std::string("cannot attach mcp_process_exit: ") + errno_text(errno));
    return;
  }
  const int fd = bpf_map__fd(skel()->maps.traced_tgids);
  const uint8_t one = 1;
  // The root, and with children followed its live descendants (by /proc's children lists).
  std::vector<pid_t> todo{target_tgid_};
  std::set<pid_t> seen;
  while (!todo.empty()) {
    const pid_t pid = todo.back();
    todo.pop_back();
    if (!seen.insert(pid).second) continue;
    uint32_t key = static_cast<uint32_t>(pid);
    if (map_io_->update(fd, &key, &one, BPF_ANY)) {
      const int err = errno;
      throw runtime_error("cannot add process " + std::to_string(pid) + " to the traced tree (map traced_tgids): " +
                          errno_text(err));
    }
    if (!follow_children_) continue;
    const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
    const DirHandle d(opendir(task_dir.c_str()));
    if (!d) continue;
    while (dirent* t = readdir(d.get())) {
      if (t->d_name[0] == '.') continue;
      std::ifstream f(task_dir + "/" + t->d_name + "/children");
      pid_t child;
      while (f >> child) todo.push_back(child);
    }
  }
  std::vector<bpf_program*> progs{skel()->progs.mcp_process_exit};
  if (follow_children_) progs.push_back(skel()->progs.mcp_process_fork);
  for (auto* prog : progs) {
    bpf_link* link = bpf_program__attach(prog);
    if (!link) throw runtime_error(std::string("cannot attach ") + bpf_program__name(prog) + ": " + errno_text(errno));
    process_links_.emplace_back(link);
  }
  // A process that exited between the /proc walk and the attach left no exit event.
  for (pid_t pid : seen)
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      uint32_t key = static_cast<uint32_t>(pid);
      // ENOENT: the exit program took it out already.
      if (map_io_->erase(fd, &key) && errno != ENOENT) {
        const int err = errno;
        map_failures_.report("traced_tgids", "cannot take exited process " + std::to_string(pid) + " out", err);
      }
    }
}

bool BpfSession::tree_alive() const {
  if (target_tgid_ <= 0) return true;
  uint32_t key;
  return bpf_map_get_next_key(bpf_map__fd(skel()->maps.traced_tgids), nullptr, &key) == 0;
}

bool BpfSession::traces(pid_t pid) const {
  if (pid == getpid()) return false;
  if (target_tgid_ <= 0 || pid == target_tgid_) return true;
  if (!follow_children_) return false;
  uint32_t key = static_cast<uint32_t>(pid);
  uint8_t v;
  return map_io_->lookup(bpf_map__fd(skel()->maps.traced_tgids), &key, &v) == 0;  // ENOENT: not traced
}

void BpfSession::watch_libraries() {
  std::lock_guard lock(lib_mu_);
  if (!find_vma_ || lib_watchers_++ > 0) return;
  lib_watch_link_.reset(bpf_program__attach(skel()->progs.mcp_lib_mmap));
  if (!lib_watch_link_) {
    // No syscall tracepoints (tracefs not mounted): the raw syscall exit, filtered on mmap.
    const int err = errno;
    lib_watch_link_.reset(bpf_program__attach(skel()->progs.mcp_lib_sys_exit));
    if (!lib_watch_link_) {
      lib_watchers_ = 0;
      throw runtime_error("cannot watch library mappings (tracepoint syscalls/sys_exit_mmap: " + errno_text(err) +
                          "; raw tracepoint sys_exit: " + errno_text(errno) + ")");
    }
    spdlog::warn("CUDA discovery: syscall tracepoints unavailable ({}); watching mmap through the raw sys_exit "
                 "tracepoint, which runs at every syscall exit on the node", errno_text(err));
  }
}

void BpfSession::unwatch_libraries() {
  std::lock_guard lock(lib_mu_);
  if (lib_watchers_ == 0 || --lib_watchers_ > 0) return;
  lib_watch_link_.reset();
}

std::vector<mcp_lib_mapped> BpfSession::take_mapped_libraries() {
  std::lock_guard lock(lib_mu_);
  if (!lib_ring_) {
    auto on_record = [](void* ctx, void* data, size_t size) -> int {
      if (size < sizeof(mcp_lib_mapped)) return 0;
      mcp_lib_mapped rec;
      std::memcpy(&rec, data, sizeof(rec));
      rec.name[sizeof(rec.name) - 1] = '\0';
      static_cast<std::vector<mcp_lib_mapped>*>(ctx)->push_back(rec);
      return 0;
    };
    lib_ring_.reset(ring_buffer__new(bpf_map__fd(skel()->maps.lib_events), on_record, &lib_pending_, nullptr));
    if (!lib_ring_) {
      map_failures_.report("lib_events", "cannot read library mappings", errno);
      return {};
    }
  }
  if (ring_buffer__consume(lib_ring_.get()) < 0)
    map_failures_.report("lib_events", "cannot read library mappings", errno);
  return std::exchange(lib_pending_, {});
}

void BpfSession::set_runtime_file(const mcp_file_key& key, uint8_t kind) {
  if (map_io_->update(bpf_map__fd(skel()->maps.cuda_runtime_files), &key, &kind, BPF_ANY) != 0)
    throw runtime_error("cannot record a CUDA runtime file (cuda_runtime_files full?): " + errno_text(errno));
}

void BpfSession::erase_runtime_file(const mcp_file_key& key) {
  // ENOENT: never recorded. Another failure leaves a file counted as a CUDA runtime (its
  // driver launches taken as nested) until its inode is reused.
  if (map_io_->erase(bpf_map__fd(skel()->maps.cuda_runtime_files), &key) && errno != ENOENT)
    map_failures_.report("cuda_runtime_files", "cannot forget a CUDA runtime file", errno);
}

}  // namespace mcp::loader
