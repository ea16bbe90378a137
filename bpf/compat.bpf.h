/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the programs use beyond Linux 5.10, each behind a load-time setting the agent
 * fills from its probe of the kernel (loader/kernel_features.h): the verifier folds the
 * setting to a constant and never looks at the branch the kernel cannot run, so one
 * object loads on 5.10 and uses the fast path where the kernel has it. bpf_find_vma is the
 * exception: its callback cannot sit even in a dead branch before 5.13, so the CUDA programs
 * are built twice (cuda_nofv.bpf.c) and the agent loads one build.
 */
#ifndef MCP_COMPAT_BPF_H
#define MCP_COMPAT_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_core_read.h>

const volatile bool mcp_attach_cookie __weak = true;  /* bpf_get_attach_cookie (5.15) */
const volatile bool mcp_task_btf __weak = true;       /* bpf_get_current_task_btf (5.11) */
const volatile bool mcp_task_storage __weak = true;   /* task storage maps (5.11) */
const volatile bool mcp_fetch_atomics __weak = true;  /* BPF_FETCH atomics: cmpxchg, fetch-add (5.12) */
const volatile bool mcp_task_pt_regs __weak = true;   /* bpf_task_pt_regs (5.15) */
const volatile bool mcp_ancestor_cgroup __weak = true; /* bpf_get_current_ancestor_cgroup_id in probes (5.14) */

/* Without attach cookies every probe runs its own copy of the program, whose reference
 * to this one-slot map the agent points at the probe's own, holding its cookie. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} probe_cookie SEC(".maps") __weak;

static __always_inline __u64 mcp_cookie(void *ctx)
{
	__u32 zero = 0;
	__u64 *v;

	if (mcp_attach_cookie)
		return bpf_get_attach_cookie(ctx);
	v = bpf_map_lookup_elem(&probe_cookie, &zero);
	return v ? *v : 0;
}

/*
 * The current task. With a BTF-typed pointer (5.11) its fields are direct loads, which cost
 * no call; before, the pointer is a plain number and every field a probe read.
 * mcp_task_read(task, a->b, a, b) is task->a->b either way.
 */
static __always_inline struct task_struct *mcp_current(void)
{
	if (mcp_task_btf)
		return bpf_get_current_task_btf();
	return (struct task_struct *)bpf_get_current_task();
}

#define mcp_task_read(task, direct, ...) (mcp_task_btf ? (task)->direct : BPF_CORE_READ(task, __VA_ARGS__))

/* A zeroed value for mcp_task_slot's first write (the largest per-thread value fits). */
const volatile __u8 mcp_zero_value[256] __weak = {};

/*
 * Per-thread state of the current task in a task-storage map, or, before 5.11, in the same
 * map retyped by the agent to an LRU hash keyed by thread id (a thread that dies mid-call
 * leaves an entry the LRU reclaims). create: make it, zeroed, when missing.
 */
static __always_inline void *mcp_task_slot(void *map, struct task_struct *task, bool create)
{
	__u32 tid;
	void *v;

	if (mcp_task_storage)
		return bpf_task_storage_get(map, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	tid = (__u32)bpf_get_current_pid_tgid();
	v = bpf_map_lookup_elem(map, &tid);
	if (v || !create)
		return v;
	bpf_map_update_elem(map, &tid, (const void *)mcp_zero_value, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &tid);
}

/* Drops the current thread's slot where it is a hash entry (task storage goes with the task). */
static __always_inline void mcp_task_slot_drop(void *map)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!mcp_task_storage)
		bpf_map_delete_elem(map, &tid);
}

#endif /* MCP_COMPAT_BPF_H */
