// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * User function probes. One entry and one return program serve every traced
 * function: the agent attaches them once per target with the probe id as the
 * BPF cookie. Without latency the entry emits a UPROBE record; with latency the
 * entry stashes args and start time and the return emits one URETPROBE record
 * carrying args, return value and duration.
 */
#include "uprobe_latency.bpf.h"

/* Entry of a function traced without latency: emit at once. */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_entry)
{
	return uprobe_entry_only(ctx);
}

/* Fallback pair (kernels without uprobe sessions): the return runs on every call. */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_latency_entry)
{
	latency_entry(ctx);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(mcp_uretprobe)
{
	return latency_return(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
