/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A traced function's programs, shared by the perf-attached ones (uprobe.bpf.c) and the
 * uprobe_multi ones (session.bpf.c): the entry-only program, and the two halves of a
 * function traced with latency (the fallback uprobe + uretprobe pair, or the session).
 */
#ifndef MCP_UPROBE_LATENCY_BPF_H
#define MCP_UPROBE_LATENCY_BPF_H

#include "sample.bpf.h"

/* Entry of a function traced without latency: emit at once. */
static __always_inline int uprobe_entry_only(struct pt_regs *ctx)
{
	__u32 probe_id = mcp_cookie(ctx);
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task);
	__u64 args[MCP_MAX_ARGS], threshold, now = 0, trace_id[2];
	__u32 flags;

	if (!mcp_wanted(id >> 32))
		return 0;
	mcp_read_args(ctx, args);
	if (mcp_sample(probe_id, args, &now, false, &threshold, &flags, trace_id) != MCP_KEEP)
		return 0;
	mcp_emit_call(ctx, task, id, probe_id, MCP_KIND_UPROBE, now, threshold, flags, args, 0, 0, trace_id);
	return 0;
}

/*
 * Entry of a function traced with latency: remember the call for its return,
 * keyed by this frame's stack pointer. A frame's key already taken means that
 * earlier call never returned through its uretprobe (longjmp'd over): it is
 * counted orphaned and replaced, or removed when this call is not kept.
 * Returns whether this call's return must run (uprobe sessions skip it).
 */
static __always_inline int latency_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct mcp_call_key key = { .tid = (__u32)id, .probe_id = mcp_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) };
	struct mcp_call_entry entry = {};
	/* int, not long: before 6.5 the map update the verifier calls directly returns an int,
	 * so its error arrives zero-extended (-EEXIST as 0xffffffef) and a 64-bit compare misses it */
	int err;

	if (!mcp_wanted(id >> 32))
		return MCP_RETURN_SKIPPED;
	mcp_read_args(ctx, entry.args);
	if (mcp_sample(key.probe_id, entry.args, &entry.ktime_ns, false, &entry.threshold, &entry.flags,
		       entry.trace_id) != MCP_KEEP) {
		/* this frame's return must not pair with a call longjmp'd over at the same sp */
		if (bpf_map_delete_elem(&call_entries, &key) == 0)
			mcp_count(key.probe_id, orphaned);
		return MCP_RETURN_SKIPPED;
	}
	err = bpf_map_update_elem(&call_entries, &key, &entry, BPF_NOEXIST);
	if (err == -EEXIST) {
		mcp_count(key.probe_id, orphaned);
		err = bpf_map_update_elem(&call_entries, &key, &entry, BPF_EXIST);
	}
	if (err) {
		mcp_count(key.probe_id, orphaned); /* no room: kept, never to be paired */
		return MCP_RETURN_SKIPPED;
	}
	return MCP_RETURN_WANTED;
}

/* The return pairs with the entry of its own frame: sp is one slot above it. */
static __always_inline int latency_return(struct pt_regs *ctx)
{
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task);
	struct mcp_call_key key = { .tid = (__u32)id, .probe_id = mcp_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) - MCP_RET_SP_ADJUST };
	struct mcp_call_entry *entry;
	__u64 now;

	mcp_count_trap(); /* a uretprobe traps on every call; a session's return only on kept ones */
	entry = bpf_map_lookup_elem(&call_entries, &key);
	if (!entry)
		return 0; /* sampled out, out of scope, or entered before we attached */
	now = bpf_ktime_get_ns();
	mcp_emit_call(ctx, task, id, key.probe_id, MCP_KIND_URETPROBE, entry->ktime_ns, entry->threshold,
		      entry->flags | MCP_EV_HAS_RET | MCP_EV_HAS_DURATION, entry->args,
		      (__s64)PT_REGS_RC(ctx), now - entry->ktime_ns, entry->trace_id);
	bpf_map_delete_elem(&call_entries, &key);
	return 0;
}

#endif /* MCP_UPROBE_LATENCY_BPF_H */
