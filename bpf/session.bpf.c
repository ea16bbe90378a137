// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Uprobe-session programs (BPF_TRACE_UPROBE_SESSION, Linux 6.13+): one program
 * runs at a function's entry and, only when the entry returned 0
 * (MCP_RETURN_WANTED), again at its return. The agent attaches these instead
 * of an entry uprobe and a uretprobe where the kernel has sessions, so a call
 * the entry does not keep takes no return trap; elsewhere they are not loaded.
 * The kfunc is declared here alone: bpftool's static linker (libbpf 1.1)
 * cannot merge one extern function declared in two objects.
 */
#include "cuda_call.bpf.h"
#include "uprobe_latency.bpf.h"

/* Tells a session program's return run from its entry run. Weak: older kernels lack it. */
extern bool bpf_session_is_return(void) __ksym __weak;
/* This call's 8-byte slot shared by its entry and return runs. */
extern __u64 *bpf_session_cookie(void) __ksym __weak;

/* Uprobe session: a call the entry did not keep takes no return trap at all. */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_session)
{
	if (bpf_session_is_return())
		return latency_return(ctx);
	return latency_entry(ctx);
}

/* Uprobe session: a call the entry did not keep (nor time) takes no return trap;
 * one timed only for slow detection keeps its start in the session cookie. */
SEC("uprobe")
int BPF_KPROBE(mcp_cuda_session)
{
	if (bpf_session_is_return())
		return cuda_return(ctx, bpf_session_cookie());
	return cuda_entry(ctx, bpf_session_cookie());
}

/* The entry-only programs again, attached as uprobe_multi links (BPF_TRACE_UPROBE_MULTI)
 * for probes sampled in time windows: a multi link attaches without the perf event
 * layer, whose close holds the lock the next attach needs for a whole grace period.
 * Loaded where the kernel has multi links (6.6+), sessions or not. */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_multi)
{
	return uprobe_entry_only(ctx);
}

SEC("uprobe")
int BPF_KPROBE(mcp_cuda_launch_multi)
{
	return cuda_launch_at_entry(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
