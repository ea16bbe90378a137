/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sampling decision and record emission shared by every program family.
 * Order: scope (pid tree, cgroup) -> probability (random draw or trace id
 * against the probe's threshold, or that of the longest trace-id prefix rule
 * holding the id; see sample_math.h) -> tenant quota (per-CPU
 * token bucket). The quota is applied to sampled-in events so it caps what a
 * tenant actually ships. The outcome is an enum mcp_decision.
 */
#ifndef MCP_SAMPLE_BPF_H
#define MCP_SAMPLE_BPF_H

#include "compat.bpf.h"
#include "sample_math.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

/* libbpf before 1.2 stops at PARM5. */
#ifndef PT_REGS_PARM6
#if defined(__TARGET_ARCH_x86)
#define PT_REGS_PARM6(x) (((const struct pt_regs *)(x))->r9)
#elif defined(__TARGET_ARCH_arm64)
#define PT_REGS_PARM6(x) (((const struct user_pt_regs *)(x))->regs[5])
#endif
#endif

/* What an entry returns in a uprobe session (session.bpf.c): run the return
 * program for this call or not. */
#define MCP_RETURN_WANTED 0
#define MCP_RETURN_SKIPPED 1

#ifndef EEXIST
#define EEXIST 17
#endif

/* Stack pointer at a uretprobe minus this = the entry's: x86-64's ret pops the
 * return address; arm64 returns through the link register. */
#if defined(__TARGET_ARCH_x86)
#define MCP_RET_SP_ADJUST 8
#else
#define MCP_RET_SP_ADJUST 0
#endif

/* The six integer argument registers of a function entry (SysV ABI order). */
static __always_inline void mcp_read_args(struct pt_regs *ctx, __u64 *args)
{
	args[0] = PT_REGS_PARM1(ctx);
	args[1] = PT_REGS_PARM2(ctx);
	args[2] = PT_REGS_PARM3(ctx);
	args[3] = PT_REGS_PARM4(ctx);
	args[4] = PT_REGS_PARM5(ctx);
	args[5] = PT_REGS_PARM6(ctx);
}

/* A probe's (or tenant bucket's) counters on this CPU; NULL only for a bad id. */
static __always_inline struct mcp_counters *mcp_counters_of(__u32 probe_id)
{
	return bpf_map_lookup_elem(&counters, &probe_id);
}

/* Atomic: a preempted program on this CPU must not lose another's update. */
#define mcp_bump(c, field)                                      \
	do {                                                    \
		if (c)                                          \
			__sync_fetch_and_add(&(c)->field, 1);   \
	} while (0)

#define mcp_count(probe_id, field)                                             \
	do {                                                                   \
		struct mcp_counters *__c = mcp_counters_of(probe_id);         \
		mcp_bump(__c, field);                                          \
	} while (0)

/* One breakpoint trap taken on this CPU (trap_counts). */
static __always_inline void mcp_count_trap(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&trap_counts, &zero);

	if (n)
		__sync_fetch_and_add(n, 1);
}

#define mcp_count_tenant(bucket, field)                                        \
	do {                                                                   \
		__u32 __b = (bucket);                                          \
		struct mcp_counters *__c = bpf_map_lookup_elem(&tenant_counters, &__b); \
		mcp_bump(__c, field);                                          \
	} while (0)

/* Scope by process: false means the event is not ours at all (not even seen). */
static __always_inline bool mcp_wanted(__u32 tgid)
{
	if (self_tgid && tgid == self_tgid)
		return false;
	if (!targ_tgid)
		return true;
	if (tgid == targ_tgid)
		return true;
	return follow_children && bpf_map_lookup_elem(&traced_tgids, &tgid);
}

/*
 * Hex digit value + 1 by character (0: not hex). A table lookup, not branches:
 * fourteen unrolled three-way branches multiply the verifier's states past its
 * limit once the rest of the decision path is added.
 */
static const __u8 mcp_hex_plus1[256] = {
	['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
	['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
	['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/*
 * The W3C trace id at ptr as two big-endian halves: id[0] = bytes 0..7,
 * id[1] = bytes 8..15, so OpenTelemetry's randomness R (the last 7 bytes) is
 * id[1]'s low 56 bits. MCP_TRACE_ID_INTEGER: the argument itself is id[1].
 * Returns false (id zeroed) if unreadable or, for hex32, any of the 32
 * characters is not hex.
 */
static __always_inline bool mcp_read_trace_id(const void *ptr, __u8 format, __u64 *id)
{
	if (format == MCP_TRACE_ID_INTEGER) {
		id[0] = 0;
		id[1] = (__u64)ptr;
		return true;
	}
	if (format == MCP_TRACE_ID_BYTES16) {
		if (bpf_probe_read_user(id, 16, ptr))
			return false; /* the helper zeroes id on a fault */
		id[0] = bpf_be64_to_cpu(id[0]);
		id[1] = bpf_be64_to_cpu(id[1]);
	} else {
		/* 16 characters at a time through id itself: no 32-byte buffer on
		 * stacks already near the 512-byte limit */
		const __u8 *h = (const __u8 *)id;
		__u64 bad = 0, half[2];
#pragma unroll
		for (int k = 0; k < 2; k++) {
			__u64 v = 0;
			if (bpf_probe_read_user(id, 16, (const char *)ptr + 16 * k))
				bad = ~0ULL;
#pragma unroll
			for (int i = 0; i < 16; i++) {
				__u64 d = (__u64)mcp_hex_plus1[h[i]] - 1; /* ~0 when not hex */
				bad |= d;
				v = (v << 4) | (d & 0xf);
			}
			half[k] = v;
		}
		if (bad > 0xf) {
			id[0] = 0;
			id[1] = 0;
			return false;
		}
		id[0] = half[0];
		id[1] = half[1];
	}
	return true;
}

/*
 * Probability step. Returns true to keep; *threshold and *flags describe the
 * decision for the record. args may be NULL when the probe has no arguments;
 * trace_id (two words, see mcp_read_trace_id) is NULL when the caller keeps no
 * trace id, else it receives the id a MCP_EV_CONSISTENT decision used (0 when
 * the caller zeroed it and no id was read). *slot: the trace-id prefix rule
 * (trace_prefixes) that decided, 0 when the probe's own threshold did.
 */
static __always_inline bool mcp_decide(__u32 probe_id, const struct mcp_probe_config *cfg,
				       const __u64 *args, __u64 *threshold, __u32 *flags,
				       __u64 *trace_id, __u32 *slot)
{
	__u64 t = cfg->threshold;

	*threshold = t;
	*flags = 0;
	*slot = 0;
	if (cfg->trace_id_arg && args && trace_id) {
		__u32 n = cfg->trace_id_arg - 1;
		if (n < MCP_MAX_ARGS &&
		    mcp_read_trace_id((const void *)args[n], cfg->trace_id_format, trace_id)) {
			struct mcp_prefix_key key = {
				.prefixlen = 32 + 128,
				.probe_id = probe_id,
			};
			struct mcp_prefix_rule *rule;

			*(__u64 *)&key.id[0] = bpf_cpu_to_be64(trace_id[0]);
			*(__u64 *)&key.id[8] = bpf_cpu_to_be64(trace_id[1]);
			/* the longest prefix rule of this probe holding the id decides with its own
			 * threshold: OTel-exact inside the prefix, and the record carries it */
			rule = bpf_map_lookup_elem(&trace_prefixes, &key);
			if (rule) {
				t = rule->threshold;
				*threshold = t;
				*slot = rule->slot;
			}
			*flags = MCP_EV_CONSISTENT;
			return mcp_otel_keep(trace_id[1], t);
		}
		/* unreadable trace id: fall back to a random draw, unflagged */
	}
	if (t == MCP_KEEP_ALL)
		return true;
	/* one 32-bit draw: p is exact to 2^-32, and the hot path halves its helper calls */
	return mcp_draw_keep(bpf_get_prandom_u32(), t);
}

static __always_inline __u32 mcp_tenant_bucket(__u64 cgroup_id)
{
	__u64 h = 0xcbf29ce484222325ULL;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		h ^= (cgroup_id >> (8 * i)) & 0xff;
		h *= 0x100000001b3ULL;
	}
	return h % MCP_TENANT_BUCKETS;
}

/* kernfs_node.parent, renamed __parent in 6.15: whichever this kernel has (CO-RE). */
struct kernfs_node___old {
	struct kernfs_node *parent;
} __attribute__((preserve_access_index));

static __always_inline struct kernfs_node *mcp_kn_parent(struct kernfs_node *kn)
{
	struct kernfs_node___old *old = (void *)kn;

	if (bpf_core_field_exists(old->parent))
		return BPF_CORE_READ(old, parent);
	return BPF_CORE_READ(kn, __parent);
}

/*
 * The value of the deepest scope_cgroups entry for probe_id (0: tenants) that holds the
 * current task: its own cgroup first, then each ancestor up to the root; 0 when none.
 * One ancestor-id call and one hash lookup per level (a pod's container sits at level 4
 * in the kubelet's layout).
 */
static __always_inline __u64 mcp_scope_of(__u32 probe_id)
{
	struct task_struct *task = mcp_current();
	struct mcp_scope_key key = { .probe_id = probe_id };
	int level;

	if (!mcp_ancestor_cgroup) {
		/* before 5.14 probes cannot ask for an ancestor's id: walk the cgroup's kernfs
		 * parents, whose ids are the cgroup ids, deepest first */
		struct kernfs_node *kn = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn);

		for (int i = 0; i <= MCP_MAX_CGROUP_LEVEL && kn; i++) {
			__u64 *v;

			key.cgroup_id = BPF_CORE_READ(kn, id);
			v = bpf_map_lookup_elem(&scope_cgroups, &key);
			if (v)
				return *v;
			kn = mcp_kn_parent(kn);
		}
		return 0;
	}
	level = mcp_task_read(task, cgroups->dfl_cgrp->level, cgroups, dfl_cgrp, level);
	if (level > MCP_MAX_CGROUP_LEVEL)
		level = MCP_MAX_CGROUP_LEVEL;
	for (int i = 0; i <= MCP_MAX_CGROUP_LEVEL; i++) {
		__u64 *v;

		if (level - i < 0)
			break;
		key.cgroup_id = bpf_get_current_ancestor_cgroup_id(level - i);
		v = bpf_map_lookup_elem(&scope_cgroups, &key);
		if (v)
			return *v;
	}
	return 0;
}

/*
 * The current task's tenant id: the deepest configured tenant cgroup it is under (a QoS
 * slice, a pod, every pod of a namespace); else its own cgroup.
 */
static __always_inline __u64 mcp_tenant_id(void)
{
	__u64 id = mcp_scope_of(0);

	return id ? id : bpf_get_current_cgroup_id();
}

/*
 * Tenant quota: this CPU's token bucket of the tenant's bucket. True = within
 * quota. Lock-free, because a program preempted on this CPU may be interleaved
 * with another: the refill is claimed by a compare-and-swap on last_ns (one
 * winner adds the elapsed time's tokens), a token is taken by an atomic
 * subtract and given back when there was none. tokens_milli is read as signed:
 * a racing taker may push it briefly below zero.
 */
static __always_inline bool mcp_quota_allows(__u32 bucket, __u64 now)
{
	struct mcp_quota_config *cfg = bpf_map_lookup_elem(&quota_configs, &bucket);
	struct mcp_quota_state *st = bpf_map_lookup_elem(&quota_states, &bucket);
	__u64 cap, last, elapsed, add;
	__s64 before;

	if (!cfg || !st || cfg->burst_milli == 0)
		return true;
	cap = cfg->burst_milli;
	last = st->last_ns;
	if (!mcp_fetch_atomics) {
		/* Before 5.12 (no fetching atomics) a tracing program runs with preemption off,
		 * so this CPU's bucket has one user at a time: plain reads and writes. */
		if (last == 0) {
			st->last_ns = now;
			st->tokens_milli += cap;
		} else if (now > last) {
			elapsed = now - last;
			if (elapsed > 10000000000ULL)
				elapsed = 10000000000ULL;
			add = elapsed * cfg->rate_milli / 1000000000ULL;
			if (add) {
				__u64 cur = st->tokens_milli + add;

				st->last_ns = now;
				st->tokens_milli = (__s64)cur > (__s64)cap ? cap : cur;
			}
		}
		if ((__s64)st->tokens_milli < 1000)
			return false;
		st->tokens_milli -= 1000;
		return true;
	}
	if (last == 0) {
		if (__sync_val_compare_and_swap(&st->last_ns, 0, now) == 0)
			__sync_fetch_and_add(&st->tokens_milli, cap);
	} else if (now > last) {
		elapsed = now - last;
		/* the agent caps rate_milli at 1.8e9, so the product stays below 2^64 */
		if (elapsed > 10000000000ULL)
			elapsed = 10000000000ULL;
		add = elapsed * cfg->rate_milli / 1000000000ULL;
		/* frequent callers must not round their refills away: time accrues
		 * until it is worth at least one thousandth of an event */
		if (add && __sync_val_compare_and_swap(&st->last_ns, last, now) == last) {
			__u64 cur = __sync_fetch_and_add(&st->tokens_milli, add) + add;
			/* one attempt to clamp; a racing update leaves the next refill to do it */
			if ((__s64)cur > (__s64)cap)
				__sync_val_compare_and_swap(&st->tokens_milli, cur, cap);
		}
	}
	before = (__s64)__sync_fetch_and_sub(&st->tokens_milli, 1000);
	if (before >= 1000)
		return true;
	__sync_fetch_and_add(&st->tokens_milli, 1000);
	return false;
}

/*
 * Wake the consumer only when this record takes the backlog across
 * wakeup_bytes. Waking on every record past the mark costs an interrupt per
 * event while the consumer is busy draining (measured: 10x the cost of a
 * traced syscall); the consumer also polls on a short timeout, so quiet
 * periods and a missed crossing still drain.
 */
static __always_inline __u64 mcp_wakeup_flags(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	return avail >= wakeup_bytes && avail < wakeup_bytes + size ? BPF_RB_FORCE_WAKEUP
								  : BPF_RB_NO_WAKEUP;
}

/*
 * bpf_get_current_pid_tgid() of task (mcp_current()): tgid << 32 | pid (both as seen from the
 * root namespace). Direct loads where the task is BTF-typed: a CO-RE load costs no call, where
 * each helper (comm, cgroup id, pid_tgid) is a kernel function call, and calls are dear on this
 * path (kernels with Safe RET or retpolines pay for every return and indirect jump).
 */
static __always_inline __u64 mcp_pid_tgid(const struct task_struct *task)
{
	if (!mcp_task_btf)
		return bpf_get_current_pid_tgid();
	return (__u64)(__u32)task->tgid << 32 | (__u32)task->pid;
}

/*
 * task: the current task (mcp_current()); pid_tgid: its mcp_pid_tgid(). comm and
 * the cgroup id are read from the task as bpf_get_current_comm() and
 * bpf_get_current_cgroup_id() would (task->comm is kept NUL-padded by the kernel;
 * the cgroup chain is RCU-protected and the program runs under RCU; a load
 * that faults reads 0).
 */
static __always_inline void mcp_fill_header_of(struct mcp_event_header *h, struct task_struct *task,
					       __u64 pid_tgid, __u32 probe_id, __u16 kind, __u64 ktime,
					       __u64 threshold, __u32 flags, __u32 size)
{
	h->ktime_ns = ktime;
	h->threshold = threshold;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->probe_id = probe_id;
	h->kind = kind;
	h->cpu = bpf_get_smp_processor_id();
	h->flags = flags;
	h->size = size;
	if (!mcp_task_btf) {
		h->cgroup_id = bpf_get_current_cgroup_id();
		bpf_get_current_comm(h->comm, sizeof(h->comm));
		return;
	}
	const __u64 *comm = (const __u64 *)task->comm;
	__u64 *dst = (__u64 *)h->comm;

	h->cgroup_id = task->cgroups->dfl_cgrp->kn->id;
	dst[0] = comm[0];
	dst[1] = comm[1];
}

/* pid_tgid: the caller's bpf_get_current_pid_tgid(), taken once per program run. */
static __always_inline void mcp_fill_header(struct mcp_event_header *h, __u64 pid_tgid,
					    __u32 probe_id, __u16 kind, __u64 ktime, __u64 threshold,
					    __u32 flags, __u32 size)
{
	mcp_fill_header_of(h, mcp_current(), pid_tgid, probe_id, kind, ktime, threshold, flags, size);
}

/* The stacks probe `probe_id` is configured to carry (MCP_STACK_*; 0: none). */
static __always_inline __u8 mcp_stack_wanted(__u32 probe_id)
{
	__u32 key = probe_id;
	struct mcp_probe_config *cfg = bpf_map_lookup_elem(&probe_configs, &key);

	return cfg ? cfg->stack : 0;
}

/* Takes the stacks `want` names into s; frames a helper could not take count 0. The user
 * stack is taken twice, as addresses and as (build id, file offset): both unwind the same
 * frame-pointer chain at the same instant. */
static __always_inline void mcp_fill_stack(void *ctx, struct mcp_stack *s, __u8 want)
{
	long ips = 0, ids = 0, kernel = 0;

	if (want & MCP_STACK_USER) {
		ips = bpf_get_stack(ctx, s->user_ips, sizeof(s->user_ips), BPF_F_USER_STACK);
		ids = bpf_get_stack(ctx, s->user_ids, sizeof(s->user_ids), BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	}
	if (want & MCP_STACK_KERNEL)
		kernel = bpf_get_stack(ctx, s->kernel_ips, sizeof(s->kernel_ips), 0);
	/* BPF has no signed division: the sizes are checked positive, then divided unsigned */
	__u64 nips = ips > 0 ? (__u64)ips / 8 : 0;
	__u64 nids = ids > 0 ? (__u64)ids / sizeof(struct mcp_build_id_frame) : 0;

	s->user_frames = nips < nids ? nips : nids;
	s->kernel_frames = kernel > 0 ? (__u64)kernel / 8 : 0;
	s->pad = 0;
}

static __always_inline void mcp_fill_call(struct mcp_call_event *e, struct task_struct *task, __u64 pid_tgid,
					  __u32 probe_id, __u16 kind, __u64 ktime, __u64 threshold, __u32 flags,
					  __u32 size, const __u64 *args, __s64 ret, __u64 duration,
					  const __u64 *trace_id)
{
	mcp_fill_header_of(&e->hdr, task, pid_tgid, probe_id, kind, ktime, threshold, flags, size);
#pragma unroll
	for (int i = 0; i < MCP_MAX_ARGS; i++)
		e->args[i] = args ? args[i] : 0;
	e->ret = ret;
	e->duration_ns = duration;
	e->trace_id[0] = trace_id ? trace_id[0] : 0;
	e->trace_id[1] = trace_id ? trace_id[1] : 0;
}

/* Emit a call record (with its stacks when the probe asks for them); counts it lost when
 * the ring buffer is full. ctx: the program's, for the stacks. task and pid_tgid as for
 * mcp_fill_header_of; trace_id: the decision's (NULL: none). */
static __always_inline void mcp_emit_call(void *ctx, struct task_struct *task, __u64 pid_tgid, __u32 probe_id,
					  __u16 kind, __u64 ktime, __u64 threshold, __u32 flags,
					  const __u64 *args, __s64 ret, __u64 duration,
					  const __u64 *trace_id)
{
	__u8 stack = mcp_stack_wanted(probe_id);

	if (stack) {
		struct mcp_call_stack_event *s = bpf_ringbuf_reserve(&events, sizeof(*s), 0);

		if (!s) {
			mcp_count(probe_id, lost);
			return;
		}
		mcp_fill_call(&s->call, task, pid_tgid, probe_id, kind, ktime, threshold, flags | MCP_EV_HAS_STACK,
			      sizeof(*s), args, ret, duration, trace_id);
		mcp_fill_stack(ctx, &s->stack, stack);
		bpf_ringbuf_submit(s, mcp_wakeup_flags(sizeof(*s)));
		return;
	}
	struct mcp_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		mcp_count(probe_id, lost);
		return;
	}
	mcp_fill_call(e, task, pid_tgid, probe_id, kind, ktime, threshold, flags, sizeof(*e), args, ret, duration,
		      trace_id);
	bpf_ringbuf_submit(e, mcp_wakeup_flags(sizeof(*e)));
}

/* The event's time, read once and only when first needed (*now == 0: not yet). */
static __always_inline __u64 mcp_now(__u64 *now)
{
	if (!*now)
		*now = bpf_ktime_get_ns();
	return *now;
}

/*
 * Quota step for an event already sampled in (by the probability step, or by
 * slow-launch mode): counts kept or quota-dropped for the probe and its tenant.
 * *now is the event's time, read here when the caller has not (0): only the
 * quota and a kept record need the clock, so a sampled-out event never reads it.
 */
static __always_inline enum mcp_decision mcp_admit(struct mcp_counters *c, __u64 cgroup_id, __u64 *now)
{
	mcp_now(now);
	if (quotas_enabled) {
		__u32 bucket = mcp_tenant_bucket(cgroup_id);

		if (!mcp_quota_allows(bucket, *now)) {
			mcp_count_tenant(bucket, quota_dropped);
			mcp_bump(c, quota_dropped);
			return MCP_QUOTA_DROP;
		}
		mcp_count_tenant(bucket, kept);
	}
	mcp_bump(c, kept);
	return MCP_KEEP;
}

/*
 * Entry-side decision for any probe: scope, then counts seen, decides, applies
 * the quota, counts kept. *now as for mcp_admit: set on every sampled-in
 * outcome (MCP_KEEP, MCP_QUOTA_DROP), untouched otherwise. force_in
 * (slow-launch mode) replaces the probability step by a keep at weight 1 (*threshold = ~0, MCP_EV_SLOW_MODE): it overrides
 * only "sampled out", never scope or quota. The caller emits on MCP_KEEP.
 * trace_id: as for mcp_decide (NULL: the caller records none).
 */
static __always_inline enum mcp_decision mcp_sample(__u32 probe_id, const __u64 *args, __u64 *now,
						    bool force_in, __u64 *threshold, __u32 *flags,
						    __u64 *trace_id)
{
	__u32 key = probe_id;
	struct mcp_probe_config *cfg = bpf_map_lookup_elem(&probe_configs, &key);
	struct mcp_counters *c, *pc = NULL;
	enum mcp_decision d;
	__u64 cgroup_id = 0;
	__u32 slot = 0;

	*flags = 0;
	*threshold = 0;
	if (trace_id) {
		trace_id[0] = 0;
		trace_id[1] = 0;
	}
	if (!cfg)
		return MCP_NOT_OURS;
	/* every family but tracepoints passes arguments, and took a breakpoint trap to get here */
	if (args)
		mcp_count_trap();
	/* a probe scoped to cgroups (a cgroup path, a container id, pods, a container probe's
	 * containers) sees only the tasks in or below them */
	if (cfg->cgroup_id && !mcp_scope_of(probe_id))
		return MCP_NOT_OURS;
	if (quotas_enabled)
		cgroup_id = mcp_tenant_id();
	c = mcp_counters_of(probe_id);
	mcp_bump(c, seen);
	if (quotas_enabled)
		mcp_count_tenant(mcp_tenant_bucket(cgroup_id), seen);
	if (force_in) {
		/* every call is kept while forced, so each stands for itself: weight 1 */
		*threshold = MCP_KEEP_ALL;
		*flags = MCP_EV_SLOW_MODE;
	} else {
		bool keep = mcp_decide(probe_id, cfg, args, threshold, flags, trace_id, &slot);

		if (slot) {
			pc = bpf_map_lookup_elem(&prefix_counters, &slot);
			mcp_bump(pc, seen);
		}
		if (!keep)
			return MCP_SAMPLED_OUT;
		if (cfg->window_end_ns) {
			/* a sampling window counts exactly its scheduled length: a close that
			 * comes late (a busy machine) must not lengthen it */
			if (bpf_ktime_get_ns() > cfg->window_end_ns)
				return MCP_SAMPLED_OUT;
			*flags |= MCP_EV_WINDOWED;
		}
	}
	d = mcp_admit(c, cgroup_id, now);
	if (d == MCP_KEEP)
		mcp_bump(pc, kept);
	else
		mcp_bump(pc, quota_dropped);
	return d;
}

#endif /* MCP_SAMPLE_BPF_H */
