// KernelFeatures: what the running kernel offers the BPF programs, probed once at start
// (libbpf's helper and map probes, the kernel's BTF, one test load), each named with the
// Linux version that brought it and what the agent does without it. The programs read the
// same answers as load-time settings (bpf/compat.bpf.h), so one object runs from 5.10 on.
// MCP_KERNEL_FEATURES_OFF=name,name... turns features off as if the kernel lacked them (the
// tests run every fallback on a new kernel); MCP_UPROBE_SESSION=off is uprobe_sessions.
#pragma once
#include <string>
#include <vector>

namespace mcp::loader {

struct KernelFeature {
  const char* name;      // stable key: metric label, MCP_KERNEL_FEATURES_OFF
  const char* needs;     // what the kernel must have
  const char* since;     // the Linux version that brought it
  const char* without;   // what the agent does without it ("" for a required feature)
  bool present = false;
};

struct KernelFeatures {
  std::string release;  // uname -r
  bool btf = false;             // required: CO-RE
  bool ringbuf = false;         // required: the event ring
  bool task_btf = false;
  bool task_storage = false;
  bool fetch_atomics = false;
  bool attach_cookie = false;
  bool task_pt_regs = false;
  bool ancestor_cgroup = false;
  bool find_vma = false;
  bool uprobe_multi = false;
  bool uprobe_sessions = false;

  // Probed on first use (needs the privileges to load BPF), then the same answer.
  static const KernelFeatures& get();
  std::vector<KernelFeature> list() const;
  // One line per feature that is off: "cuda launch cache off: needs bpf_find_vma (5.17)".
  std::vector<std::string> off_lines() const;
  // Empty when the agent can run; else one line naming what is missing.
  std::string unsupported() const;
  // The README's support matrix (Markdown): each feature by kernel version, from list()'s
  // versions; the kernel tier checks those versions on the kernels CI boots.
  static std::string support_matrix();
};

}  // namespace mcp::loader
