// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Process lifecycle: the traced process tree and calls that never return.
 * - fork: a child of a traced process joins traced_tgids (like strace -f);
 *   attached only when the agent follows children.
 * - exit: a thread leaving with a kept syscall still pending (exit_group,
 *   a killed task) counts it orphaned; the last thread of a traced process
 *   removes it from traced_tgids, so an empty map means the tree is gone.
 */
#include "sample.bpf.h"

SEC("tp_btf/sched_process_fork")
int BPF_PROG(mcp_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 one = 1;

	if (ptgid == ctgid || !bpf_map_lookup_elem(&traced_tgids, &ptgid))
		return 0; /* a new thread, or not our tree */
	bpf_map_update_elem(&traced_tgids, &ctgid, &one, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(mcp_process_exit, struct task_struct *task)
{
	struct mcp_syscall_entry *entry;
	__u32 tgid = task->tgid;

	entry = bpf_task_storage_get(&syscall_entries, task, 0, 0);
	if (entry && entry->probe_id) {
		mcp_count(entry->probe_id, orphaned);
		entry->probe_id = 0;
	}
	/* do_exit decrements signal->live before this tracepoint: 0 = the last thread */
	if (targ_tgid && BPF_CORE_READ(task, signal, live.counter) == 0)
		bpf_map_delete_elem(&traced_tgids, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
