// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUDA runtime and driver API probes. One entry and one return program serve
 * every API: the probe's configuration says which API it is and which
 * arguments to follow; the raw registers go to the agent, which decodes them
 * per API (see mcp_abi.h). A launch is reported at its entry by one program
 * (mcp_cuda_launch) unless its API latency is asked for (--cuda-latency, or
 * slow-launch detection); every other kept call, and a timed launch, is timed
 * entry to return. Where the kernel has uprobe sessions one program serves both
 * ends and a call the entry does not need takes no return trap; elsewhere a
 * uretprobe runs on every call.
 */
#include "cuda_call.bpf.h"

/* cuda_nofv.bpf.c builds these programs again under other names */
#ifndef MCP_CUDA_NAME
#define MCP_CUDA_NAME(name) name
#endif
#define MCP_KPROBE(name) BPF_KPROBE(name)
#define MCP_KRETPROBE(name) BPF_KRETPROBE(name)

/* A launch reported at entry: one trap, kept or not, on every kernel. */
SEC("uprobe")
int MCP_KPROBE(MCP_CUDA_NAME(mcp_cuda_launch))
{
	return cuda_launch_at_entry(ctx);
}

/* Fallback pair (kernels without uprobe sessions): the return runs on every call. */
SEC("uprobe")
int MCP_KPROBE(MCP_CUDA_NAME(mcp_cuda_entry))
{
	cuda_entry(ctx, NULL);
	return 0;
}

SEC("uretprobe")
int MCP_KRETPROBE(MCP_CUDA_NAME(mcp_cuda_return))
{
	return cuda_return(ctx, NULL);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
