// Least privilege for the agent: once programs are loaded and attached, keep only the
// capabilities that running and reloading still need, and lock the process so it can
// never regain the rest (not by execve, not by file capabilities, not by setuid binaries).
//
// What the running agent keeps (runtime_capabilities), and why:
//   CAP_BPF             bpf(2) after load: updating the rate/quota maps, reading per-CPU
//                       counters, loading and linking programs for probes added on reload.
//                       (Kernels >= 5.8; before that CAP_SYS_ADMIN covers it.)
//   CAP_PERFMON         perf_event_open(2) for tracepoints attached on reload, and loading
//                       tracing program types (kprobe, tracepoint).
//   CAP_SYS_ADMIN       perf_event_open(2) of the uprobe PMU: uprobes and uretprobes attached
//                       after the drop (a reload, a probe whose file appears, a replaced file)
//                       get EACCES with CAP_PERFMON alone on current kernels (6.18 verified).
//   CAP_SYS_PTRACE      reading /proc/PID/maps and following /proc/PID/root of processes
//                       owned by other users: target resolution of libraries (libcudart,
//                       libc) for new uprobes and container-aware enrichment.
//   CAP_DAC_READ_SEARCH opening target binaries and libraries whose files or directories the
//                       agent's uid cannot read (other users' homes, container rootfs),
//                       both for ELF symbol lookup and for the kernel's path lookup.
//   CAP_SYS_RESOURCE    only on kernels < 5.11, where BPF memory is charged to
//                       RLIMIT_MEMLOCK and libbpf raises it when loading on reload.
// Dropped on purpose (everything else), e.g. CAP_SETPCAP (only needed for the drop itself),
// CAP_SYSLOG (kallsyms is read before the drop), CAP_NET_ADMIN, CAP_SYS_MODULE, CAP_DAC_OVERRIDE.
// packaging/CAPABILITIES.md has the long form, including the systemd and Kubernetes sets.
//
// Contract of drop_to():
//  - The process must be single-threaded: capabilities and no_new_privs are per thread on
//    Linux, so threads started earlier would keep everything. It throws mcp::Error
//    (runtime) instead of leaving that hole. Call it after attach and before starting the
//    metrics server, the forwarder (gRPC) and the consumers.
//  - Keeps keep ∩ (current permitted): a capability the process does not have cannot be
//    gained; those are reported in DropResult::missing, not an error (the caller decides).
//  - Effective = permitted = the kept set; inheritable and ambient are cleared; the bounding
//    set is reduced to the kept set when CAP_SETPCAP is available (otherwise left as is and
//    reported); PR_SET_NO_NEW_PRIVS is set. Any failing syscall throws mcp::Error (runtime).
#pragma once
#include <string>
#include <vector>

namespace mcp::privilege {

using Capability = int;  // CAP_* value from <linux/capability.h>

struct KernelVersion {
  int major = 0;
  int minor = 0;
};
// Parses a uname release such as "6.1.0-18-amd64"; throws mcp::Error (runtime) on garbage.
KernelVersion parse_kernel_release(const std::string& release);
KernelVersion running_kernel();

// The set the running agent keeps on this kernel (see the header comment).
std::vector<Capability> runtime_capabilities(KernelVersion kernel);

struct DropResult {
  std::vector<Capability> kept;     // now effective and permitted
  std::vector<Capability> missing;  // asked for but not held before the drop
  bool bounding_set_reduced = false;
};
DropResult drop_to(const std::vector<Capability>& keep);

// Introspection (this thread), used by drop_to's callers for logging and by the tests.
std::vector<Capability> effective_capabilities();
std::vector<Capability> permitted_capabilities();
std::vector<Capability> inheritable_capabilities();
std::vector<Capability> ambient_capabilities();
std::vector<Capability> bounding_capabilities();
bool no_new_privs();
std::string capability_name(Capability cap);                      // "cap_bpf"
std::string capability_list(const std::vector<Capability>& caps);  // "cap_bpf,cap_perfmon"

}  // namespace mcp::privilege
