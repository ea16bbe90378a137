// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Process lifecycle: the traced process tree and calls that never return.
 * - fork: a child of a traced process joins traced_tgids (like strace -f);
 *   attached only when the agent follows children.
 * - exit: a thread leaving with a kept syscall still pending (exit_group,
 *   a killed task) counts it orphaned; the last thread of a traced process
 *   removes it from traced_tgids, so an empty map means the tree is gone.
 * - mmap: a CUDA runtime or driver library mapped executable by a process in
 *   scope goes to the lib_events ring; attached only for CUDA discovery.
 */
#include "sample.bpf.h"

#define MCP_VM_EXEC 0x00000004UL
#define MCP_EBUSY 16

struct lib_lookup {
	struct mcp_lib_mapped rec;
	bool found;
};

/* "libcudart*" (runtime, including auditwheel's libcudart-HASH.so.N) or "libcuda.so*" /
 * "libcuda-*" (driver); not libcudnn, libcudadebugger, ... */
static __always_inline bool cuda_library_name(const char *n)
{
	const char p[] = "libcuda";

	for (int i = 0; i < sizeof(p) - 1; i++)
		if (n[i] != p[i])
			return false;
	if (n[7] == '.' || n[7] == '-')
		return true;
	return n[7] == 'r' && n[8] == 't' && (n[9] == '.' || n[9] == '-');
}

static long lib_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct lib_lookup *l = data;
	struct file *file = BPF_CORE_READ(vma, vm_file);
	const unsigned char *name;

	if (!file || !(BPF_CORE_READ(vma, vm_flags) & MCP_VM_EXEC))
		return 0;
	name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(l->rec.name, sizeof(l->rec.name), name) <= 0 ||
	    !cuda_library_name(l->rec.name))
		return 0;
	l->rec.dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	l->rec.ino = BPF_CORE_READ(file, f_inode, i_ino);
	l->rec.start = BPF_CORE_READ(vma, vm_start);
	l->found = true;
	return 0;
}

/* The mapping a successful mmap made: reported when it is a CUDA library's text. */
static __always_inline int lib_mapped(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct lib_lookup l = {};

	if ((ret < 0 && ret > -4096) || !mcp_wanted(id >> 32))
		return 0;
	/* EBUSY: somebody held or waited for the process's mmap lock (khugepaged, a writer queued
	 * behind a /proc/PID/maps reader), so the mapping could not be looked at. The library may
	 * be CUDA's: reported without a file (ino 0), the agent reads the process's maps instead of
	 * missing it for good. */
	long err = bpf_find_vma(bpf_get_current_task_btf(), (__u64)ret, lib_vma, &l, 0);
	if (err == -MCP_EBUSY) {
		l.rec.ino = 0;
		l.rec.start = ret;
	} else if (err || !l.found) {
		return 0;
	}
	l.rec.ktime_ns = bpf_ktime_get_ns();
	l.rec.pid = id >> 32;
	bpf_ringbuf_output(&lib_events, &l.rec, sizeof(l.rec), 0);
	return 0;
}

/* The loader maps a library's text with its own mmap (PROT_EXEC): look at the mapping
 * each successful mmap made. Every mmap in scope pays one bpf_find_vma (the mmap lock,
 * uncontended right after the call) and a name compare. */
SEC("tracepoint/syscalls/sys_exit_mmap")
int mcp_lib_mmap(struct trace_event_raw_sys_exit *ctx)
{
	return lib_mapped(ctx->ret);
}

/* The same where syscall tracepoints cannot be attached (no tracefs mounted, as in some
 * containers): the raw syscall-exit tracepoint, which needs only BTF, filtered on mmap's
 * number. It runs at every syscall exit, so it is the fallback, not the default. */
SEC("tp_btf/sys_exit")
int BPF_PROG(mcp_lib_sys_exit, struct pt_regs *regs, long ret)
{
#if defined(__TARGET_ARCH_x86)
	if (BPF_CORE_READ(regs, orig_ax) != 9) /* __NR_mmap */
		return 0;
#elif defined(__TARGET_ARCH_arm64)
	if (BPF_CORE_READ(regs, syscallno) != 222) /* __NR_mmap */
		return 0;
#else
	return 0;
#endif
	return lib_mapped(ret);
}

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

	entry = mcp_task_slot(&syscall_entries, task, false);
	if (entry && entry->probe_id) {
		mcp_count(entry->probe_id, orphaned);
		entry->probe_id = 0;
	}
	mcp_task_slot_drop(&syscall_entries);
	/* do_exit decrements signal->live before this tracepoint: 0 = the last thread */
	if (targ_tgid && BPF_CORE_READ(task, signal, live.counter) == 0)
		bpf_map_delete_elem(&traced_tgids, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
