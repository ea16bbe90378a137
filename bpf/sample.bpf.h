/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sampling decision and record emission shared by every program family.
 * Order: static rules (rodata) -> probability (random draw or trace id against
 * the probe's threshold) -> tenant quota (per-CPU token bucket). The quota is
 * applied to sampled-in events so it caps what a tenant actually ships.
 */
#ifndef MCP_SAMPLE_BPF_H
#define MCP_SAMPLE_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

/* libbpf before 1.2 stops at PARM5. */
#ifndef PT_REGS_PARM6
#if defined(__TARGET_ARCH_x86)
#define PT_REGS_PARM6(x) (((const struct pt_regs *)(x))->r9)
#elif defined(__TARGET_ARCH_arm64)
#define PT_REGS_PARM6(x) (((const struct user_pt_regs *)(x))->regs[5])
#endif
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

static __always_inline void mcp_count(__u32 probe_id, __u32 ctr)
{
	__u32 idx = MCP_COUNTER_INDEX(probe_id, ctr);
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline void mcp_count_tenant(__u32 bucket, __u32 ctr)
{
	__u32 idx = bucket * MCP_CTR_NR + ctr;
	__u64 *v = bpf_map_lookup_elem(&tenant_counters, &idx);
	if (v)
		*v += 1;
}

/* Static rules: false means the event is not ours at all (not even seen). */
static __always_inline bool mcp_wanted(__u32 tgid)
{
	if (targ_tgid && tgid != targ_tgid)
		return false;
	if (self_tgid && tgid == self_tgid)
		return false;
	return true;
}


static __always_inline int mcp_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * W3C trace-context randomness: the trace id's last 7 bytes (56 bits), as
 * OpenTelemetry's threshold sampling uses. Returns false if unreadable.
 */
static __always_inline bool mcp_trace_randomness(const void *ptr, __u8 format, __u64 *out)
{
	__u64 r = 0;

	if (format == MCP_TRACE_ID_INTEGER) {
		*out = (__u64)ptr & ((1ULL << 56) - 1);
		return true;
	}
	if (format == MCP_TRACE_ID_BYTES16) {
		__u8 b[7];
		if (bpf_probe_read_user(b, sizeof(b), (const char *)ptr + 9))
			return false;
#pragma unroll
		for (int i = 0; i < 7; i++)
			r = (r << 8) | b[i];
	} else {
		char h[14];
		if (bpf_probe_read_user(h, sizeof(h), (const char *)ptr + 18))
			return false;
#pragma unroll
		for (int i = 0; i < 14; i++) {
			int d = mcp_hex_digit(h[i]);
			if (d < 0)
				return false;
			r = (r << 4) | (__u64)d;
		}
	}
	*out = r;
	return true;
}

/*
 * Probability step. Returns true to keep; *threshold and *flags describe the
 * decision for the record. args may be NULL when the probe has no arguments.
 */
static __always_inline bool mcp_decide(const struct mcp_probe_config *cfg, const __u64 *args,
				       __u64 *threshold, __u32 *flags)
{
	__u64 t = cfg->threshold;

	*threshold = t;
	*flags = 0;
	if (cfg->trace_id_arg && args) {
		__u32 n = cfg->trace_id_arg - 1;
		__u64 r;
		if (n < MCP_MAX_ARGS &&
		    mcp_trace_randomness((const void *)args[n], cfg->trace_id_format, &r)) {
			*flags = MCP_EV_CONSISTENT;
			return t == ~0ULL || r < (t >> 8);
		}
		/* unreadable trace id: fall back to a random draw, unflagged */
	}
	if (t == ~0ULL)
		return true;
	/* one 32-bit draw: p is exact to 2^-32, and the hot path halves its helper calls */
	return ((__u64)bpf_get_prandom_u32() << 32) < t;
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

/* Tenant quota: this CPU's token bucket of the tenant's bucket. True = within quota. */
static __always_inline bool mcp_quota_allows(__u32 bucket, __u64 now)
{
	struct mcp_quota_config *cfg = bpf_map_lookup_elem(&quota_configs, &bucket);
	struct mcp_quota_state *st = bpf_map_lookup_elem(&quota_states, &bucket);
	__u64 cap, elapsed, add;

	if (!cfg || !st || cfg->burst_milli == 0)
		return true;
	cap = cfg->burst_milli;
	if (st->last_ns == 0) {
		st->tokens_milli = cap;
		st->last_ns = now;
	} else if (now > st->last_ns) {
		elapsed = now - st->last_ns;
		/* the agent caps rate_milli at 1.8e9, so the product stays below 2^64 */
		if (elapsed > 10000000000ULL)
			elapsed = 10000000000ULL;
		add = elapsed * cfg->rate_milli / 1000000000ULL;
		/* frequent callers must not round their refills away: time accrues
		 * until it is worth at least one thousandth of an event */
		if (add) {
			st->tokens_milli += add;
			if (st->tokens_milli > cap)
				st->tokens_milli = cap;
			st->last_ns = now;
		}
	}
	if (st->tokens_milli >= 1000) {
		st->tokens_milli -= 1000;
		return true;
	}
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

static __always_inline void mcp_fill_header(struct mcp_event_header *h, __u32 probe_id,
					    __u16 kind, __u64 ktime, __u64 threshold, __u32 flags,
					    __u32 size)
{
	__u64 id = bpf_get_current_pid_tgid();

	h->ktime_ns = ktime;
	h->cgroup_id = bpf_get_current_cgroup_id();
	h->threshold = threshold;
	h->pid = id >> 32;
	h->tid = (__u32)id;
	h->probe_id = probe_id;
	h->kind = kind;
	h->cpu = bpf_get_smp_processor_id();
	h->flags = flags;
	h->size = size;
	bpf_get_current_comm(h->comm, sizeof(h->comm));
}

/* Emit a call record; counts it lost when the ring buffer is full. */
static __always_inline void mcp_emit_call(__u32 probe_id, __u16 kind, __u64 ktime,
					  __u64 threshold, __u32 flags, const __u64 *args,
					  __s64 ret, __u64 duration)
{
	struct mcp_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		mcp_count(probe_id, MCP_CTR_LOST);
		return;
	}
	mcp_fill_header(&e->hdr, probe_id, kind, ktime, threshold, flags, sizeof(*e));
#pragma unroll
	for (int i = 0; i < MCP_MAX_ARGS; i++)
		e->args[i] = args ? args[i] : 0;
	e->ret = ret;
	e->duration_ns = duration;
	bpf_ringbuf_submit(e, mcp_wakeup_flags(sizeof(*e)));
}

/*
 * Entry-side decision for any probe: counts seen, decides, applies the quota,
 * counts kept. Returns true when the caller should emit (now or at return).
 */
static __always_inline bool mcp_sample(__u32 probe_id, const __u64 *args, __u64 now,
				       __u64 *threshold, __u32 *flags)
{
	__u32 bucket = 0, key = probe_id;
	struct mcp_probe_config *cfg = bpf_map_lookup_elem(&probe_configs, &key);
	__u64 cgroup_id = 0;

	if (!cfg)
		return false;
	if (cfg->cgroup_id || quotas_enabled)
		cgroup_id = bpf_get_current_cgroup_id();
	/* a probe scoped to one cgroup (container selector) does not see the others */
	if (cfg->cgroup_id && cfg->cgroup_id != cgroup_id)
		return false;
	mcp_count(probe_id, MCP_CTR_SEEN);
	if (quotas_enabled) {
		bucket = mcp_tenant_bucket(cgroup_id);
		mcp_count_tenant(bucket, MCP_CTR_SEEN);
	}
	if (!mcp_decide(cfg, args, threshold, flags))
		return false;
	if (quotas_enabled) {
		if (!mcp_quota_allows(bucket, now)) {
			mcp_count_tenant(bucket, MCP_CTR_QUOTA_DROPPED);
			mcp_count(probe_id, MCP_CTR_QUOTA_DROPPED);
			return false;
		}
		mcp_count_tenant(bucket, MCP_CTR_KEPT);
	}
	mcp_count(probe_id, MCP_CTR_KEPT);
	return true;
}

#endif /* MCP_SAMPLE_BPF_H */
