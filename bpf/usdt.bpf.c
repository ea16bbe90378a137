// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * USDT probes: the static probes a binary declares in its .note.stapsdt (<sys/sdt.h>,
 * python's function__entry and line, PostgreSQL, Node). libbpf (bpf_program__attach_usdt)
 * parses the note, sets the semaphore and records each site's argument specs in the
 * maps usdt.bpf.h declares; this one program serves every USDT probe, whose probe id is
 * the USDT cookie. A hit is sampled like a uprobe's entry (scope, probability or trace id,
 * quota); only a kept one reads the string arguments and emits a record.
 */
/* One spec per (argument specs, cookie): every USDT probe takes at least one. The agent
 * sizes both maps at load (BpfSession::open): 16,384 specs (208 bytes each), and the
 * address table libbpf fills only where the kernel has no attach cookies. */
#define BPF_USDT_MAX_SPEC_CNT 1024
#include "sample.bpf.h"
#include <bpf/usdt.bpf.h>

/* The USDT record after its header: arguments, and the strings the probe asks for. */
static __always_inline void mcp_fill_usdt(struct mcp_usdt_event *e, struct task_struct *task, __u64 pid_tgid,
					  __u32 probe_id, __u64 ktime, __u64 threshold, __u32 flags, __u32 size,
					  const __u64 *args, int nargs, const __u64 *trace_id)
{
	__u32 key = probe_id;
	struct mcp_probe_config *cfg = bpf_map_lookup_elem(&probe_configs, &key);
	__u8 wanted = cfg ? cfg->string_args : 0;
	int slot = 0;

	mcp_fill_call(&e->call, task, pid_tgid, probe_id, MCP_KIND_USDT, ktime, threshold, flags, size, args, 0, 0,
		      trace_id);
	e->nargs = nargs;
	e->str_args = 0;
	e->str_ok = 0;
#pragma unroll
	for (int i = 0; i < MCP_MAX_ARGS; i++) {
		if (!(wanted & (1u << i)) || i >= nargs || slot >= MCP_MAX_STR_ARGS)
			continue;
		e->str_args |= 1u << i;
		/* an address the traced process chose: a failed read leaves the slot empty */
		if (bpf_probe_read_user_str(e->str[slot], MCP_STR_ARG_LEN, (const void *)args[i]) > 0)
			e->str_ok |= 1u << i;
		else
			e->str[slot][0] = 0;
		slot++;
	}
	for (; slot < MCP_MAX_STR_ARGS; slot++)
		e->str[slot][0] = 0;
}

static __always_inline void mcp_emit_usdt(struct pt_regs *ctx, struct task_struct *task, __u64 pid_tgid,
					  __u32 probe_id, __u64 ktime, __u64 threshold, __u32 flags,
					  const __u64 *args, int nargs, const __u64 *trace_id)
{
	__u8 stack = mcp_stack_wanted(probe_id);

	if (stack) {
		struct mcp_usdt_stack_event *s = bpf_ringbuf_reserve(&events, sizeof(*s), 0);

		if (!s) {
			mcp_count(probe_id, lost);
			return;
		}
		mcp_fill_usdt(&s->usdt, task, pid_tgid, probe_id, ktime, threshold, flags | MCP_EV_HAS_STACK, sizeof(*s),
			      args, nargs, trace_id);
		mcp_fill_stack(ctx, &s->stack, stack);
		bpf_ringbuf_submit(s, mcp_wakeup_flags(sizeof(*s)));
		return;
	}
	struct mcp_usdt_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		mcp_count(probe_id, lost);
		return;
	}
	mcp_fill_usdt(e, task, pid_tgid, probe_id, ktime, threshold, flags, sizeof(*e), args, nargs, trace_id);
	bpf_ringbuf_submit(e, mcp_wakeup_flags(sizeof(*e)));
}

static __always_inline int usdt_hit(struct pt_regs *ctx)
{
	__u32 probe_id = bpf_usdt_cookie(ctx);
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task);
	__u64 args[MCP_MAX_ARGS] = {}, threshold, now = 0, trace_id[2];
	__u32 flags;
	int nargs;

	if (!mcp_wanted(id >> 32))
		return 0;
	nargs = bpf_usdt_arg_cnt(ctx);
	if (nargs < 0)
		return 0; /* no spec for this site: not one of ours */
#pragma unroll
	for (int i = 0; i < MCP_MAX_ARGS; i++) {
		long v = 0;

		if (i < nargs && bpf_usdt_arg(ctx, i, &v) == 0)
			args[i] = v;
	}
	if (mcp_sample(probe_id, args, &now, false, &threshold, &flags, trace_id) != MCP_KEEP)
		return 0;
	mcp_emit_usdt(ctx, task, id, probe_id, now, threshold, flags, args, nargs, trace_id);
	return 0;
}

SEC("usdt")
int mcp_usdt(struct pt_regs *ctx)
{
	return usdt_hit(ctx);
}

/* The same, attached by the agent itself: one uprobe_multi link per probe, every site's
 * cookie the index of its spec in __bpf_usdt_specs (agent/loader/usdt_spec.h). The attach
 * type is set at load (libbpf 1.1 has no section name for it). */
SEC("uprobe")
int mcp_usdt_multi(struct pt_regs *ctx)
{
	return usdt_hit(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
