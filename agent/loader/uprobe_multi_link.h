// The raw BPF_LINK_CREATE of a uprobe_multi link (Linux 6.6+), which libbpf 1.1 cannot make:
// one link, one descriptor, for any number of offsets of one file, each with its cookie.
// Its attach type makes it entry-only multi (kBpfTraceUprobeMulti) or a uprobe session
// (kBpfTraceUprobeSession, 6.13+: the program runs at entry and, when the entry returns 0,
// at return). Closing the descriptor detaches every offset.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_handle.h"

struct bpf_program;

namespace mcp::loader {

// From the kernel's uapi; Debian 12's headers and libbpf 1.1 predate them.
inline constexpr uint32_t kBpfTraceUprobeSession = 57;  // enum bpf_attach_type BPF_TRACE_UPROBE_SESSION
inline constexpr uint32_t kBpfTraceUprobeMulti = 48;    // enum bpf_attach_type BPF_TRACE_UPROBE_MULTI

// pid > 0: only in that process. ref_ctr_offsets: USDT semaphores (one per offset), or empty.
// The link's descriptor; none, with errno set, on failure.
UniqueFd attach_uprobe_multi(bpf_program* prog, uint32_t attach_type, const std::string& path,
                             const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, pid_t pid,
                             const std::vector<uint64_t>& ref_ctr_offsets = {});

}  // namespace mcp::loader
