// cgroup v2 lookups shared by tenant quotas, pod identity and probe scopes: where the cgroup2
// mount is, the id of a cgroup path (the directory's inode, what bpf_get_current_cgroup_id()
// returns on 64-bit kernels >= 5.5) and back from an id to the cgroup. Paths may be given as
// /proc/PID/cgroup writes them (relative to the mount) or already under the mount.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace mcp::cgroup {

// The cgroup2 mount point from a mountinfo file; throws mcp::Error (runtime) when there is none.
std::filesystem::path find_cgroup2_mount(
    const std::filesystem::path& mountinfo = "/proc/self/mountinfo");

// Inode of the cgroup directory. A path under `cgroup2_root` is used as is; any other, relative or
// absolute (as /proc/PID/cgroup writes it: "/kubepods.slice/..."), is taken below `cgroup2_root`. Throws mcp::Error (usage) when it is missing or not a directory.
uint64_t resolve_cgroup_id(std::string_view path, const std::filesystem::path& cgroup2_root);

// An O_DIRECTORY fd of the cgroup with v2 id `id` on the cgroup2 mount (open_by_handle_at:
// the id is the kernfs file handle; needs CAP_DAC_READ_SEARCH). Throws mcp::Error (runtime).
int open_cgroup_by_id(uint64_t id, const std::filesystem::path& cgroup2_root);

// Components of `path` below the cgroup2 mount (0 for the root cgroup), however it is spelt.
uint32_t cgroup_depth(std::string_view path, const std::filesystem::path& cgroup2_root);

}  // namespace mcp::cgroup
