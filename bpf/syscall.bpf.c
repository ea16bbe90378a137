// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Syscall probes on the per-syscall tracepoints (syscalls:sys_enter_NAME /
 * sys_exit_NAME), so untraced syscalls cost nothing. One enter and one exit
 * program serve every syscall; the probe id is the attach cookie. The decision
 * is made at entry; the exit emits one record with args, ret and duration.
 */
#include "sample.bpf.h"

SEC("tracepoint")
int mcp_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	struct mcp_syscall_entry *entry;
	__u64 threshold, now;
	__u32 flags;

	if (!mcp_wanted(bpf_get_current_pid_tgid() >> 32))
		return 0;
	now = bpf_ktime_get_ns();
	/* decide first: a dropped syscall costs no argument copy. Syscall arguments
	 * carry no trace id, so the decision is always a random draw. */
	if (!mcp_sample(probe_id, NULL, now, &threshold, &flags))
		return 0;
	/*
	 * Not a direct ctx read: the kernel refuses to attach a program whose ctx
	 * reads go past the tracepoint's record, and getppid's record has no args.
	 * The agent knows each syscall's arity and ignores the rest.
	 */
	entry = bpf_task_storage_get(&syscall_entries, bpf_get_current_task_btf(), 0,
				     BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!entry)
		return 0;
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
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	struct mcp_syscall_entry *entry;

	entry = bpf_task_storage_get(&syscall_entries, bpf_get_current_task_btf(), 0, 0);
	/* probe_id 0 marks a consumed entry; a mismatch is another syscall's leftover */
	if (!entry || entry->probe_id != probe_id)
		return 0;
	entry->probe_id = 0;
	mcp_emit_call(probe_id, MCP_KIND_SYSCALL, entry->call.ktime_ns, entry->call.threshold,
		      entry->call.flags | MCP_EV_HAS_RET | MCP_EV_HAS_DURATION, entry->call.args,
		      ctx->ret, bpf_ktime_get_ns() - entry->call.ktime_ns);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
