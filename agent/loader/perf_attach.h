// Attaching a program with a cookie where the kernel has no attach cookies (before 5.15):
// a copy of the loaded program whose reference to the one-slot map `cookie_slot`
// (probe_cookie in bpf/compat.bpf.h) points at a new one-slot map holding `cookie`,
// attached through a perf event (PERF_EVENT_IOC_SET_BPF), as libbpf does on such kernels.
// Each returns the perf event's descriptor: closing it detaches; the event holds the copy
// and the copy its map. Throws mcp::Error with one line on failure.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/unique_handle.h"

struct bpf_program;
struct bpf_map;

namespace mcp::loader {

UniqueFd attach_uprobe_copy(const bpf_program* prog, const bpf_map* cookie_slot, uint64_t cookie, bool retprobe,
                            const std::string& path, uint64_t offset, pid_t pid);
UniqueFd attach_tracepoint_copy(const bpf_program* prog, const bpf_map* cookie_slot, uint64_t cookie,
                                const std::string& category, const std::string& name);

}  // namespace mcp::loader
