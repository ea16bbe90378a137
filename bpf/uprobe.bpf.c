// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * User function probes. One entry and one return program serve every traced
 * function: the agent attaches them once per target with the probe id as the
 * BPF cookie. Without latency the entry emits a UPROBE record; with latency the
 * entry stashes args and start time and the return emits one URETPROBE record
 * carrying args, return value and duration.
 */
#include "sample.bpf.h"

/* Entry of a function traced without latency: emit at once. */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_entry)
{
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	__u64 args[MCP_MAX_ARGS], threshold, now;
	__u32 flags;

	if (!mcp_wanted(bpf_get_current_pid_tgid() >> 32))
		return 0;
	mcp_read_args(ctx, args);
	now = bpf_ktime_get_ns();
	if (mcp_sample(probe_id, args, now, false, &threshold, &flags) != MCP_KEEP)
		return 0;
	mcp_emit_call(probe_id, MCP_KIND_UPROBE, now, threshold, flags, args, 0, 0);
	return 0;
}

/*
 * Entry of a function traced with latency: remember the call for its return,
 * keyed by this frame's stack pointer. A frame's key already taken means that
 * earlier call never returned through its uretprobe (longjmp'd over): it is
 * counted orphaned and replaced, or removed when this call is not kept.
 */
SEC("uprobe")
int BPF_KPROBE(mcp_uprobe_latency_entry)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct mcp_call_key key = { .tid = (__u32)id, .probe_id = bpf_get_attach_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) };
	struct mcp_call_entry entry = {};
	long err;

	if (!mcp_wanted(id >> 32))
		return 0;
	mcp_read_args(ctx, entry.args);
	entry.ktime_ns = bpf_ktime_get_ns();
	if (mcp_sample(key.probe_id, entry.args, entry.ktime_ns, false, &entry.threshold, &entry.flags) != MCP_KEEP) {
		/* this frame's return must not pair with a call longjmp'd over at the same sp */
		if (bpf_map_delete_elem(&call_entries, &key) == 0)
			mcp_count(key.probe_id, orphaned);
		return 0;
	}
	err = bpf_map_update_elem(&call_entries, &key, &entry, BPF_NOEXIST);
	if (err == -EEXIST) {
		mcp_count(key.probe_id, orphaned);
		err = bpf_map_update_elem(&call_entries, &key, &entry, BPF_EXIST);
	}
	if (err)
		mcp_count(key.probe_id, orphaned); /* no room: kept, never to be paired */
	return 0;
}

/* The return pairs with the entry of its own frame: sp is one slot above it. */
SEC("uretprobe")
int BPF_KRETPROBE(mcp_uretprobe)
{
	struct mcp_call_key key = { .tid = (__u32)bpf_get_current_pid_tgid(),
				    .probe_id = bpf_get_attach_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) - MCP_RET_SP_ADJUST };
	struct mcp_call_entry *entry = bpf_map_lookup_elem(&call_entries, &key);
	__u64 now;

	if (!entry)
		return 0; /* sampled out, out of scope, or entered before we attached */
	now = bpf_ktime_get_ns();
	mcp_emit_call(key.probe_id, MCP_KIND_URETPROBE, entry->ktime_ns, entry->threshold,
		      entry->flags | MCP_EV_HAS_RET | MCP_EV_HAS_DURATION, entry->args,
		      (__s64)PT_REGS_RC(ctx), now - entry->ktime_ns);
	bpf_map_delete_elem(&call_entries, &key);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
