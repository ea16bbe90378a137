// Fitting the opened mcp BPF object to the running kernel before load (bpf/compat.bpf.h):
// each fallback's load-time switch, the one CUDA build that loads (with bpf_find_vma or
// cuda_nofv.bpf.c), per-thread maps as LRU hashes without task storage, and multi and session
// programs only where they attach (libbpf 1.1 has no section name for them, so their attach
// type is set by hand). Throws mcp::Error with one line when a program cannot be rewritten.
#pragma once

struct mcp_bpf;

namespace mcp::loader {

struct KernelFeatures;

void fit_to_kernel(mcp_bpf* skel, const KernelFeatures& kf);

}  // namespace mcp::loader
