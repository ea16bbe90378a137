#include "loader/kernel_features.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "common/error.h"

namespace mcp::loader {
namespace {

// Whether the kernel's BTF names `value` in enum bpf_attach_type: attach types that libbpf
// 1.1 cannot probe (uprobe_multi, sessions) are known by name.
bool attach_type_known(const char* value) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return false;
  bool found = false;
  const int id = btf__find_by_name_kind(vmlinux, "bpf_attach_type", BTF_KIND_ENUM);
  if (id > 0) {
    const btf_type* t = btf__type_by_id(vmlinux, id);
    const struct btf_enum* e = btf_enum(t);
    for (int i = 0; i < btf_vlen(t); i++)
      if (std::strcmp(btf__name_by_offset(vmlinux, e[i].name_off), value) == 0) found = true;
  }
  btf__free(vmlinux);
  return found;
}

bool helper(bpf_prog_type type, bpf_func_id id) { return libbpf_probe_bpf_helper(type, id, nullptr) == 1; }

// A fetching atomic add on the stack (BPF_ATOMIC | BPF_FETCH, 5.12): the verifier of an
// older kernel refuses the instruction.
bool fetch_atomics() {
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_0, -8, 0},
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 1},
      {BPF_STX | BPF_ATOMIC | BPF_DW, BPF_REG_10, BPF_REG_1, -8, BPF_ADD | BPF_FETCH},
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  const int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "mcp_probe", "GPL", insns,
                               sizeof(insns) / sizeof(insns[0]), nullptr);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// MCP_KERNEL_FEATURES_OFF: optional features by name, or `all` of them. A required feature
// or a name nobody knows is refused: a test that forces a fallback must not pass while
// nothing was turned off.
std::set<std::string> forced_off() {
  std::set<std::string> off;
  if (const char* env = getenv("MCP_KERNEL_FEATURES_OFF")) {
    std::set<std::string> optional;
    std::string known;
    for (const auto& f : KernelFeatures{}.list())
      if (*f.without) {
        optional.insert(f.name);
        known += (known.empty() ? "" : ", ") + std::string(f.name);
      }
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (name.empty()) continue;
      if (name == "all") {
        off.insert(optional.begin(), optional.end());
      } else if (optional.count(name)) {
        off.insert(name);
      } else {
        const bool required = name == "btf" || name == "ringbuf";
        throw usage_error("MCP_KERNEL_FEATURES_OFF: " +
                          (required ? name + " is required (the agent cannot run without it)"
                                    : "unknown feature '" + name + "'") +
                          "; optional features: " + known + ", or all");
      }
    }
  }
  if (const char* env = getenv("MCP_UPROBE_SESSION"); env && std::string(env) == "off") off.insert("uprobe_sessions");
  return off;
}

KernelFeatures probe() {
  KernelFeatures f;
  utsname u{};
  if (uname(&u) == 0) f.release = u.release;
  struct stat st;
  f.btf = stat("/sys/kernel/btf/vmlinux", &st) == 0;
  f.ringbuf = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1;
  f.task_btf = helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_get_current_task_btf);
  f.task_storage = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) == 1;
  f.fetch_atomics = fetch_atomics();
  f.attach_cookie = helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_get_attach_cookie);
  f.task_pt_regs = helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_task_pt_regs);
  f.find_vma = helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_find_vma);
  f.ancestor_cgroup = helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_get_current_ancestor_cgroup_id);
  f.uprobe_multi = attach_type_known("BPF_TRACE_UPROBE_MULTI");
  f.uprobe_sessions = attach_type_known("BPF_TRACE_UPROBE_SESSION");
  const auto off = forced_off();
  for (auto [name, flag] : {std::pair{"task_btf", &f.task_btf}, {"task_storage", &f.task_storage},
                            {"fetch_atomics", &f.fetch_atomics}, {"attach_cookie", &f.attach_cookie},
                            {"task_pt_regs", &f.task_pt_regs}, {"find_vma", &f.find_vma},
                            {"ancestor_cgroup", &f.ancestor_cgroup},
                            {"uprobe_multi", &f.uprobe_multi}, {"uprobe_sessions", &f.uprobe_sessions}})
    if (off.count(name)) *flag = false;
  // What a feature's programs need besides it (any real kernel has these together; a feature
  // turned off by hand takes the ones that need it along): helpers taking the BTF-typed task,
  // multi links carrying cookies, sessions using task storage.
  f.task_storage = f.task_storage && f.task_btf;
  f.task_pt_regs = f.task_pt_regs && f.task_btf;
  f.find_vma = f.find_vma && f.task_btf;
  f.uprobe_multi = f.uprobe_multi && f.attach_cookie;
  f.uprobe_sessions = f.uprobe_sessions && f.uprobe_multi && f.task_storage;
  return f;
}

}  // namespace

const KernelFeatures& KernelFeatures::get() {
  static const KernelFeatures features = probe();
  return features;
}

std::vector<KernelFeature> KernelFeatures::list() const {
  return {
      {"btf", "kernel BTF (/sys/kernel/btf/vmlinux)", "5.4", "", btf},
      {"ringbuf", "the BPF ring buffer", "5.8", "", ringbuf},
      {"task_btf", "bpf_get_current_task_btf", "5.11", "task fields read by probe reads", task_btf},
      {"task_storage", "task storage maps", "5.11", "per-thread state in an LRU hash by thread id", task_storage},
      {"fetch_atomics", "BPF fetching atomics", "5.12", "quota buckets updated without atomics", fetch_atomics},
      {"attach_cookie", "bpf_get_attach_cookie", "5.15",
       "a program copy per attached probe; USDT probes only with a pid or a command", attach_cookie},
      {"ancestor_cgroup", "bpf_get_current_ancestor_cgroup_id in probes", "5.14",
       "cgroup scopes found by walking the cgroup's parents", ancestor_cgroup},
      {"task_pt_regs", "bpf_task_pt_regs", "5.15", "syscalls traced at entry and exit", task_pt_regs},
      {"find_vma", "bpf_find_vma", "5.17",
       "cuda launch cache off, kernels named from /proc/PID/maps; CUDA libraries found by scanning /proc",
       find_vma},
      {"uprobe_multi", "uprobe_multi links", "6.6", "one link per probe", uprobe_multi},
      {"uprobe_sessions", "uprobe sessions (BPF_TRACE_UPROBE_SESSION)", "6.13",
       "latency uprobes take a return trap on every call", uprobe_sessions},
  };
}

std::vector<std::string> KernelFeatures::off_lines() const {
  std::vector<std::string> lines;
  for (const auto& f : list())
    if (!f.present && *f.without)
      lines.push_back(std::string(f.name) + " off: needs " + f.needs + " (" + f.since + "); " + f.without);
  return lines;
}

std::string KernelFeatures::unsupported() const {
  std::string missing;
  for (const auto& f : list())
    if (!f.present && !*f.without) missing += (missing.empty() ? "" : ", ") + std::string(f.needs) + " (" + f.since + ")";
  if (missing.empty()) return "";
  return "this kernel (" + release + ") lacks " + missing + ": mcp-agent needs Linux 5.10 or newer with BTF";
}

std::string KernelFeatures::support_matrix() {
  // The kernels users' nodes run; * marks those CI boots (scripts/vmtest), with this machine's.
  static const std::pair<const char*, int> kKernels[] = {
      {"5.10*", 5010}, {"5.15", 5015}, {"6.1*", 6001}, {"6.6", 6006}, {"6.12*", 6012}, {"6.13+", 6013}};
  auto version = [](const char* v) {
    int major = 0, minor = 0;
    sscanf(v, "%d.%d", &major, &minor);
    return major * 1000 + minor;
  };
  std::string out = "| feature | needs |";
  std::string rule = "|---|---|";
  for (const auto& [name, v] : kKernels) {
    out += std::string(" ") + name + " |";
    rule += "---|";
  }
  out += " without it |\n" + rule + "---|\n";
  for (const auto& f : KernelFeatures{}.list()) {
    out += std::string("| `") + f.name + "` | " + f.needs + " (" + f.since + ") |";
    for (const auto& [name, v] : kKernels) out += version(f.since) <= v ? " yes |" : " off |";
    out += std::string(" ") + (*f.without ? f.without : "required: the agent does not start") + " |\n";
  }
  return out;
}

}  // namespace mcp::loader
