// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Syscall probes on the per-syscall tracepoints (syscalls:sys_enter_NAME /
 * sys_exit_NAME), so untraced syscalls cost nothing; the probe id is the
 * attach cookie. Without latency a syscall runs one program, at exit: it
 * decides, and a kept call reads its arguments from the task's saved user
 * registers. With latency the entry decides and stashes arguments and start
 * time; the exit emits one record with args, ret and duration.
 */
#include "sample.bpf.h"

/* The syscall's arguments from the user registers saved at kernel entry. */
static __always_inline void mcp_syscall_args(struct task_struct *task, __u64 *args)
{
	struct pt_regs *regs;

	if (!mcp_task_pt_regs) {
		/* before 5.15 the agent traces every syscall through entry and exit */
		__builtin_memset(args, 0, MCP_MAX_ARGS * sizeof(*args));
		return;
	}
	regs = (struct pt_regs *)bpf_task_pt_regs(task);

#if defined(__TARGET_ARCH_x86)
	args[0] = regs->di;
	args[1] = regs->si;
	args[2] = regs->dx;
	args[3] = regs->r10;
	args[4] = regs->r8;
	args[5] = regs->r9;
#elif defined(__TARGET_ARCH_arm64)
	args[0] = regs->orig_x0;
#pragma unroll
	for (int i = 1; i < MCP_MAX_ARGS; i++)
		args[i] = regs->regs[i];
#endif
}

/* Without latency: the whole probe, at exit. */
SEC("tracepoint")
int mcp_sys_exit_only(struct trace_event_raw_sys_exit *ctx)
{
	__u32 probe_id = mcp_cookie(ctx);
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task);
	__u64 args[MCP_MAX_ARGS], threshold, now = 0;
	__u32 flags;

	if (!mcp_wanted(id >> 32))
		return 0;
	/* Syscall arguments carry no trace id, so the decision is always a random draw. */
	if (mcp_sample(probe_id, NULL, &now, false, &threshold, &flags, NULL) != MCP_KEEP)
		return 0;
	mcp_syscall_args(task, args);
	mcp_emit_call(ctx, task, id, probe_id, MCP_KIND_SYSCALL, now, threshold, flags | MCP_EV_HAS_RET, args, ctx->ret, 0, NULL);
	return 0;
}

SEC("tracepoint")
int mcp_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 probe_id = mcp_cookie(ctx);
	struct task_struct *task = mcp_current();
	struct mcp_syscall_entry *entry;
	__u64 threshold, now = 0;
	__u32 flags;

	if (!mcp_wanted(mcp_pid_tgid(task) >> 32))
		return 0;
	/* decide first: a dropped syscall costs no argument copy and no clock read */
	if (mcp_sample(probe_id, NULL, &now, false, &threshold, &flags, NULL) != MCP_KEEP)
		return 0;
	entry = mcp_task_slot(&syscall_entries, task, true);
	if (!entry) {
		mcp_count(probe_id, orphaned);
		return 0;
	}
	/* a kept syscall whose exit never came (a missed exit tracepoint) */
	if (entry->probe_id)
		mcp_count(entry->probe_id, orphaned);
	/*
	 * Not a direct ctx read: the kernel refuses to attach a program whose ctx
	 * reads go past the tracepoint's record, and getppid's record has no args.
	 * The agent knows each syscall's arity and ignores the rest.
	 */
	if (bpf_probe_read_kernel(entry->call.args, sizeof(entry->call.args), &ctx->args[0]))
		__builtin_memset(entry->call.args, 0, sizeof(entry->call.args));
	entry->probe_id = probe_id;
	entry->call.ktime_ns = now;
	entry->call.threshold = threshold;
	entry->call.flags = flags;
	return 0;
}

SEC("tracepoint")
int mcp_sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u32 probe_id = mcp_cookie(ctx);
	struct task_struct *task = mcp_current();
	struct mcp_syscall_entry *entry;

	entry = mcp_task_slot(&syscall_entries, task, false);
	/* probe_id 0 marks a consumed entry; a mismatch is another syscall's leftover */
	if (!entry || entry->probe_id != probe_id)
		return 0;
	entry->probe_id = 0;
	mcp_emit_call(ctx, task, mcp_pid_tgid(task), probe_id, MCP_KIND_SYSCALL, entry->call.ktime_ns, entry->call.threshold,
		      entry->call.flags | MCP_EV_HAS_RET | MCP_EV_HAS_DURATION, entry->call.args,
		      ctx->ret, bpf_ktime_get_ns() - entry->call.ktime_ns, NULL);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
