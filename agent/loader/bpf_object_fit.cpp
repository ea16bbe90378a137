#include "loader/bpf_object_fit.h"

#include <bpf/libbpf.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "loader/kernel_features.h"
#include "loader/uprobe_multi_link.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {
namespace {

// Before 5.12 the verifier refuses a fetching atomic (BPF_FETCH, cmpxchg, xchg) anywhere in a
// program, even in a branch it would prune: those sit only on paths the programs take when
// mcp_fetch_atomics is set (bpf/compat.bpf.h), so there they become no-ops (ja +0). The
// count of instructions stays, so libbpf's relocations still point where they did.
void strip_fetch_atomics(bpf_object* obj) {
  bpf_program* prog;
  bpf_object__for_each_program(prog, obj) {
    const bpf_insn* in = bpf_program__insns(prog);
    std::vector<bpf_insn> insns(in, in + bpf_program__insn_cnt(prog));
    size_t n = 0;
    for (auto& insn : insns)
      if (insn.code == (BPF_STX | BPF_ATOMIC | BPF_W) || insn.code == (BPF_STX | BPF_ATOMIC | BPF_DW))
        if (insn.imm != BPF_ADD) {
          insn = bpf_insn{BPF_JMP | BPF_JA, 0, 0, 0, 0};
          n++;
        }
    if (n && bpf_program__set_insns(prog, insns.data(), insns.size()) != 0)
      throw runtime_error(std::string("cannot rewrite program ") + bpf_program__name(prog) + "'s atomics");
  }
}

}  // namespace

void fit_to_kernel(mcp_bpf* skel, const KernelFeatures& kf) {
  skel->rodata->mcp_attach_cookie = kf.attach_cookie;
  skel->rodata->mcp_task_btf = kf.task_btf;
  skel->rodata->mcp_task_storage = kf.task_storage;
  skel->rodata->mcp_fetch_atomics = kf.fetch_atomics;
  skel->rodata->mcp_task_pt_regs = kf.task_pt_regs;
  skel->rodata->mcp_ancestor_cgroup = kf.ancestor_cgroup;
  for (bpf_program* prog : {skel->progs.mcp_cuda_launch, skel->progs.mcp_cuda_entry, skel->progs.mcp_cuda_return,
                            skel->progs.mcp_lib_mmap, skel->progs.mcp_lib_sys_exit})
    bpf_program__set_autoload(prog, kf.find_vma);
  for (bpf_program* prog : {skel->progs.mcp_cuda_launch_nofv, skel->progs.mcp_cuda_entry_nofv,
                            skel->progs.mcp_cuda_return_nofv})
    bpf_program__set_autoload(prog, !kf.find_vma);
  if (!kf.fetch_atomics) strip_fetch_atomics(skel->obj);
  if (!kf.task_storage)
    for (bpf_map* m : {skel->maps.syscall_entries, skel->maps.cuda_timed, skel->maps.cuda_runtime_call}) {
      bpf_map__set_type(m, BPF_MAP_TYPE_LRU_HASH);
      bpf_map__set_map_flags(m, 0);
      bpf_map__set_max_entries(m, 16384);
    }
  for (bpf_program* prog : {skel->progs.mcp_uprobe_session, skel->progs.mcp_cuda_session, skel->progs.mcp_uprobe_multi,
                            skel->progs.mcp_cuda_launch_multi, skel->progs.mcp_usdt_multi}) {
    const bool multi = prog == skel->progs.mcp_uprobe_multi || prog == skel->progs.mcp_cuda_launch_multi ||
                       prog == skel->progs.mcp_usdt_multi;
    // The CUDA session and multi programs are built with bpf_find_vma (session.bpf.c): without
    // it they do not load, and CUDA probes take the nofv programs (perf-attached). The USDT
    // program finds its spec by cookie.
    const bool cuda = prog == skel->progs.mcp_cuda_session || prog == skel->progs.mcp_cuda_launch_multi;
    const bool usdt = prog == skel->progs.mcp_usdt_multi;
    if ((multi ? kf.uprobe_multi : kf.uprobe_sessions) && (!cuda || kf.find_vma) && (!usdt || kf.attach_cookie))
      bpf_program__set_expected_attach_type(
          prog, static_cast<bpf_attach_type>(multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession));
    else
      bpf_program__set_autoload(prog, false);
  }
}

}  // namespace mcp::loader
