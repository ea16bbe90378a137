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
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task);
	__u64 args[MCP_MAX_ARGS], threshold, now = 0, trace_id[2];
	__u32 flags;

	if (!mcp_wanted(id >> 32))
		return 0;
	mcp_read_args(ctx, args);
	if (mcp_sample(probe_id, args, &now, false, &threshold, &flags, trace_id) != MCP_KEEP)
		return 0;
	mcp_emit_call(task, id, probe_id, MCP_KIND_UPROBE, now, threshold, flags, args, 0, 0, trace_id);
	return 0;
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
