#include "loader/uprobe_multi_link.h"

#include <bpf/libbpf.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mcp::loader {
namespace {

// The link_create part of union bpf_attr, uprobe_multi variant (include/uapi/linux/bpf.h).
struct UprobeMultiLinkAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(UprobeMultiLinkAttr) == 64, "link_create.uprobe_multi layout");

}  // namespace

UniqueFd attach_uprobe_multi(bpf_program* prog, uint32_t attach_type, const std::string& path,
                             const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, pid_t pid,
                             const std::vector<uint64_t>& ref_ctr_offsets) {
  UprobeMultiLinkAttr attr{};
  if (!ref_ctr_offsets.empty()) attr.ref_ctr_offsets = reinterpret_cast<uint64_t>(ref_ctr_offsets.data());
  attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
  attr.attach_type = attach_type;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.pid = pid > 0 ? static_cast<uint32_t>(pid) : 0;
  return UniqueFd(static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr))));
}

}  // namespace mcp::loader
