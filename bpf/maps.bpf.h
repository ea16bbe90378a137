/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every map and load-time setting, declared once. __weak lets each program
 * family include this header; `bpftool gen object` merges them into one object,
 * so all families share one ring buffer, one counter array and one skeleton.
 */
#ifndef MCP_MAPS_BPF_H
#define MCP_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "mcp_abi.h"

/* Load-time settings (rodata): the verifier prunes what they switch off. */
const volatile __u32 targ_tgid __weak = 0;      /* trace only this process tree; 0 = all */
const volatile bool follow_children __weak = false; /* the tree: targ_tgid and its descendants */
const volatile __u32 self_tgid __weak = 0;      /* the agent itself, never traced */
const volatile __u64 wakeup_bytes __weak = 65536; /* wake the consumer past this backlog */
const volatile bool quotas_enabled __weak = false;

/* Kept events to userspace. Size set by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} events SEC(".maps") __weak;

/* Run-time configuration per probe id (threshold, trace-id argument). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MCP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct mcp_probe_config);
} probe_configs SEC(".maps") __weak;

/* probe id -> struct mcp_counters (per CPU, atomic adds; see mcp_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct mcp_counters);
} counters SEC(".maps") __weak;

/* Breakpoint traps taken by the uprobe-family programs on this CPU (key 0): the agent
 * weighs them against the trap's cost to tell whether tracing slowed the workload
 * (agent/loader/estimate_modes.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} trap_counts SEC(".maps") __weak;

/* Processes being traced when targ_tgid is set: tgid -> 1. The agent seeds the
 * root (and, following children, its live descendants); fork adds children,
 * exit removes a process, so an empty map means the traced tree is gone. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps") __weak;

/* Tenant quota per bucket, config and state both per CPU: the hot path reads and
 * writes only its own CPU's slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_TENANT_BUCKETS);
	__type(key, __u32);
	__type(value, struct mcp_quota_config);
} quota_configs SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_TENANT_BUCKETS);
	__type(key, __u32);
	__type(value, struct mcp_quota_state);
} quota_states SEC(".maps") __weak;

/*
 * Scope by cgroup subtree (struct mcp_scope_key), the one table of cgroup scopes: tenants
 * (probe id 0) and the scopes of probes (a cgroup path or container selector, a pod or
 * namespace selector, a container-aware probe's containers), each any number of cgroups.
 * A task is under an entry's cgroup when its own cgroup or one of its ancestors is that
 * cgroup, whatever cgroup namespace the agent is in (ids are global). Written only by the
 * agent's control loop (runtime/scope_table.h), as pods and containers come and go; the
 * kernel only reads it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MCP_MAX_SCOPE_CGROUPS);
	__type(key, struct mcp_scope_key);
	__type(value, __u64);
} scope_cgroups SEC(".maps") __weak;

/* tenant bucket -> struct mcp_counters, same meanings as per probe. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_TENANT_BUCKETS);
	__type(key, __u32);
	__type(value, struct mcp_counters);
} tenant_counters SEC(".maps") __weak;

/* Trace-id prefix rules (struct mcp_prefix_key); each rule's decisions are counted in
 * prefix_counters at its slot (seen, kept and quota_dropped; lost and orphaned stay per probe). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MCP_MAX_TRACE_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mcp_prefix_key);
	__type(value, struct mcp_prefix_rule);
} trace_prefixes SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_MAX_TRACE_PREFIXES);
	__type(key, __u32);
	__type(value, struct mcp_counters);
} prefix_counters SEC(".maps") __weak;

/*
 * Calls waiting for their return (uretprobe), keyed by the entry's stack
 * pointer: recursion gives each frame its own entry, and a return pairs only
 * with its own call (x86-64: at return sp == entry sp + 8, the return address
 * popped). A plain hash, not LRU: an entry is removed by its return, counted
 * orphaned when a new call at the same frame finds it (the old one was
 * longjmp'd over), or swept and counted by the agent after detaching.
 */
/* struct mcp_call_key is in mcp_abi.h: the agent sweeps this map. */
struct mcp_call_entry {
	__u64 ktime_ns;
	__u64 threshold;
	__u64 args[MCP_MAX_ARGS];
	__u32 flags;
	__u32 pad;
	__u64 trace_id[2];      /* the decision's, for the record (uprobes; syscalls leave 0) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mcp_call_key);
	__type(value, struct mcp_call_entry);
} call_entries SEC(".maps") __weak;

/* A thread is in at most one syscall: task storage beats a hash on the hot path. */
struct mcp_syscall_entry {
	struct mcp_call_entry call;
	__u32 probe_id;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mcp_syscall_entry);
} syscall_entries SEC(".maps") __weak;

/* CUDA: slow-launch mode. A launch slower than cuda_slow_ns puts its process in
 * slow mode for cuda_hold_ns: every launch kept, user stacks captured. */
const volatile __u64 cuda_slow_ns __weak = 0; /* 0: off */
const volatile __u64 cuda_hold_ns __weak = 10000000000ULL;

struct mcp_cuda_entry {
	__u64 ktime_ns;
	__u64 threshold;
	__u32 flags;
	__u32 pad;
	__u64 regs[MCP_MAX_ARGS];
	__u64 stack_args[3];
	__u64 deref[MCP_CUDA_DEREF_BYTES / 8];
	__u64 code_file_offset;
	__u64 code_inode;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mcp_call_key);
	__type(value, struct mcp_cuda_entry);
} cuda_entries SEC(".maps") __weak;

/*
 * Uprobe sessions: the registers of a launch timed only for slow detection
 * (sampled out), one slot per thread, tagged with the call's key. Its start
 * time is in the session cookie, so a launch that is not slow costs no map
 * write at entry and no lookup or delete at return; the slot is read only
 * for a slow one. A timed launch nested in another on the same thread takes
 * the slot: the outer one, if slow, is still kept and timed, but unnamed.
 */
struct mcp_cuda_timed {
	struct mcp_call_key key;
	__u64 regs[MCP_MAX_ARGS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mcp_cuda_timed);
} cuda_timed SEC(".maps") __weak;

/*
 * Where a launch's code address lies (file offset, inode), cached so a launch loop pays
 * bpf_find_vma (the mmap lock, a tree walk) once per kernel, not per launch. Per CPU and
 * direct-mapped by (process, address): a hit is an inlined array lookup and a few
 * compares, no hash and no helper call; a collision only costs a bpf_find_vma.
 * Invalidation: a slot is valid only for the process and address space (mm) it was
 * found in and while that address space is unchanged: mm_lock_seq, which every mmap
 * write lock (mmap, munmap, mprotect, brk, exec) bumps, must be what it was. check
 * (a mix of the other fields, computed from them as stored) makes a slot read while
 * half-written, by a program that preempted its writer on this CPU, a miss.
 */
#define MCP_CODE_SLOTS 256 /* per CPU; a power of two */

struct mcp_code_place {
	__u64 mm;           /* the mm_struct it was found in */
	__u64 addr;         /* the code address */
	__u64 file_offset;
	__u64 inode;
	__u64 dev;          /* the file's super block dev */
	__u32 tgid;
	__u32 mm_seq;       /* mm->mm_lock_seq then (even: unlocked) */
	__u64 check;        /* mcp_code_check() of the fields above */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MCP_CODE_SLOTS);
	__type(key, __u32);
	__type(value, struct mcp_code_place);
} cuda_code_places SEC(".maps") __weak;

/* tid -> the launch probe whose call is in progress: a launch API that calls
 * another (__cudaLaunchKernel -> cudaLaunchKernel) is one launch, not two. */
struct mcp_launch_owner {
	__u32 probe_id;
	__u32 pad;
	__u64 ktime_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct mcp_launch_owner);
} cuda_launch_owner SEC(".maps") __weak;

/* Files holding a CUDA runtime (struct mcp_file_key -> enum mcp_runtime_file), written by
 * the agent as it attaches runtime probes: a driver launch called from one of them is the
 * runtime's half of a launch already reported (MCP_CUDA_CFG_DRIVER_LAUNCH). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct mcp_file_key);
	__type(value, __u8);
} cuda_runtime_files SEC(".maps") __weak;

/* The thread's latest marked runtime launch (MCP_CUDA_CFG_MARK_THREAD): the slot of its
 * return address and that address. While the call is in progress the slot holds it and
 * any deeper call has a lower stack pointer; once it returned, the caller's next call at
 * that depth overwrites the slot. */
struct mcp_runtime_call {
	__u64 sp;
	__u64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mcp_runtime_call);
} cuda_runtime_call SEC(".maps") __weak;

/* CUDA libraries mapped by processes (struct mcp_lib_mapped), for the agent's discovery.
 * Rare records (a library's first mapping per process): a small ring of its own, so they
 * never compete with events for room. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} lib_events SEC(".maps") __weak;

/* tgid -> ktime until which the process is in slow-launch mode */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} cuda_slow_until SEC(".maps") __weak;

#endif /* MCP_MAPS_BPF_H */
