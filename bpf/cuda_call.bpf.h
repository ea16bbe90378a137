/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The entry and return halves of a CUDA API probe, shared by the fallback
 * uprobe + uretprobe pair (cuda.bpf.c) and the uprobe session (session.bpf.c).
 */
#ifndef MCP_CUDA_CALL_BPF_H
#define MCP_CUDA_CALL_BPF_H

#include "sample.bpf.h"


/* entry-map only: timed for slow detection, but not sampled in */
#define MCP_ENTRY_SAMPLED_OUT (1u << 31)

struct vma_lookup {
	__u64 addr;
	__u64 file_offset;
	__u64 inode;
	__u64 dev;
};

#ifdef MCP_NO_FIND_VMA
/* Before 5.13 a program may not even hold a callback's address, in a branch never taken:
 * this build of the CUDA programs (cuda_nofv.bpf.c) has no bpf_find_vma, and the agent
 * loads it where the kernel lacks the helper (it names the code from /proc/PID/maps). */
#define mcp_find_vma_in(task, addr, l) (-1)
#else
/* The mapping that holds a code address: its file and the address's offset in it,
 * so the agent can symbolise even after the process (and its maps) are gone. */
static long locate_code(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_lookup *l = data;
	struct file *file = BPF_CORE_READ(vma, vm_file);

	l->file_offset = l->addr - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	if (file) {
		l->inode = BPF_CORE_READ(file, f_inode, i_ino);
		l->dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	}
	return 0;
}

#define mcp_find_vma_in(task, addr, l) bpf_find_vma(task, addr, locate_code, l, 0)
#endif

/* A mix of a cuda_code_places slot's fields. mm is loaded from the slot (volatile):
 * the verifier allows no arithmetic on the mm pointer the program itself holds. */
static __always_inline __u64 mcp_code_check(const struct mcp_code_place *p)
{
	__u64 mm = *(const volatile __u64 *)&p->mm;
	__u64 h = mm ^ (p->addr * 0x9e3779b97f4a7c15ULL) ^ (p->file_offset << 17) ^ p->inode ^ (p->dev << 40);

	return (h ^ ((__u64)p->tgid << 32 | p->mm_seq)) * 0xff51afd7ed558ccdULL | 1;
}

/*
 * l->addr's file and offset in task's address space through cuda_code_places (see
 * maps.bpf.h): a hit costs two direct loads (mm, mm_lock_seq), an inlined per-CPU
 * array lookup and compares; a miss, or a changed address space, runs bpf_find_vma
 * and caches its answer. Returns 0 when found.
 */
static __always_inline int locate_code_cached(struct task_struct *task, __u32 tgid, struct vma_lookup *l)
{
	struct mm_struct *mm;
	struct mcp_code_place *slot = NULL;
	__u32 seq = 0, idx;

#ifdef MCP_NO_FIND_VMA
	return -1;
#endif
	mm = task->mm;
	/* mm_lock_seq is a seqcount since Linux 6.13; without it nothing is cached */
	if (bpf_core_field_exists(mm->mm_lock_seq.sequence)) {
		seq = mm->mm_lock_seq.sequence;  /* a direct load, not a helper call */
		if (!(seq & 1)) {                 /* odd: a mapping change is under way */
			idx = (__u32)(((l->addr ^ tgid) * 0x9e3779b97f4a7c15ULL) >> 56) & (MCP_CODE_SLOTS - 1);
			slot = bpf_map_lookup_elem(&cuda_code_places, &idx);
		}
	}
	if (slot && slot->mm == (__u64)mm && slot->addr == l->addr && slot->tgid == tgid &&
	    slot->mm_seq == seq && slot->check == mcp_code_check(slot)) {
		l->file_offset = slot->file_offset;
		l->inode = slot->inode;
		l->dev = slot->dev;
		return 0;
	}
	if (mcp_find_vma_in(task, l->addr, l))
		return -1;
	if (slot) {
		slot->mm = (__u64)mm;
		slot->addr = l->addr;
		slot->file_offset = l->file_offset;
		slot->inode = l->inode;
		slot->dev = l->dev;
		slot->tgid = tgid;
		slot->mm_seq = seq;
		slot->check = mcp_code_check(slot); /* last: it covers the fields above */
	}
	return 0;
}

/* regs[n1 - 1] for a 1-based argument number from the probe config, 0 if out of range */
static __always_inline __u64 arg_at(const __u64 *regs, __u8 n1)
{
	__u32 idx = (__u32)n1 - 1;

	if (idx >= MCP_MAX_ARGS)
		return 0;
	return regs[idx];
}

static __always_inline bool in_slow_mode(__u32 tgid, __u64 *now)
{
	__u64 *until = bpf_map_lookup_elem(&cuda_slow_until, &tgid);
	return until && *until > mcp_now(now);
}

static __always_inline bool is_launch(__u8 api)
{
	return api == MCP_CUDA_LAUNCH || api == MCP_CUDA_LAUNCH_HANDLE || api == MCP_CUDA_LAUNCH_EXC ||
	       api == MCP_CUDA_CU_LAUNCH || api == MCP_CUDA_CU_LAUNCH_EX;
}

static __always_inline bool folds_nested(const struct mcp_probe_config *cfg)
{
	return is_launch(cfg->cuda_api) && (cfg->cuda_flags & MCP_CUDA_CFG_FOLD_NESTED);
}

/*
 * A runtime launch in a file that also holds application code (MCP_CUDA_CFG_MARK_THREAD):
 * remember where its return address sits, so a driver launch it makes is recognised.
 */
static __always_inline void mark_runtime_call(struct task_struct *task, const struct mcp_probe_config *cfg,
					      __u64 sp)
{
	struct mcp_runtime_call *c;
	__u64 ret;

	if (!(cfg->cuda_flags & MCP_CUDA_CFG_MARK_THREAD) || bpf_probe_read_user(&ret, sizeof(ret), (void *)sp))
		return;
	c = mcp_task_slot(&cuda_runtime_call, task, true);
	if (c) {
		c->sp = sp;
		c->ret = ret;
	}
}

/*
 * A driver launch (MCP_CUDA_CFG_DRIVER_LAUNCH) made by a CUDA runtime on behalf of a
 * launch the application made through the runtime, already reported there: its caller
 * (the return address at sp) lies in a file of cuda_runtime_files, and for a file that
 * also holds application code, a marked runtime launch of this thread is in progress
 * (its return address still in its slot, above this frame).
 */
static __always_inline bool nested_in_runtime(struct task_struct *task, __u32 tgid,
					      const struct mcp_probe_config *cfg, __u64 sp)
{
	struct vma_lookup l = {};
	struct mcp_file_key k;
	struct mcp_runtime_call *c;
	__u8 *kind;
	__u64 slot;

	if (!(cfg->cuda_flags & MCP_CUDA_CFG_DRIVER_LAUNCH))
		return false;
	if (bpf_probe_read_user(&l.addr, sizeof(l.addr), (void *)sp) || locate_code_cached(task, tgid, &l))
		return false;
	k.dev = l.dev;
	k.ino = l.inode;
	kind = bpf_map_lookup_elem(&cuda_runtime_files, &k);
	if (!kind)
		return false;
	if (*kind == MCP_RUNTIME_SHARED)
		return true;
	c = mcp_task_slot(&cuda_runtime_call, task, false);
	if (!c || c->sp <= sp || bpf_probe_read_user(&slot, sizeof(slot), (void *)c->sp))
		return false;
	return slot == c->ret;
}

/*
 * Returns whether this call's return must run (uprobe sessions skip it).
 * cookie: the uprobe session's cookie (NULL for the fallback uretprobe pair):
 * a launch timed only for slow detection keeps its start time there (never 0)
 * and its registers in cuda_timed, not an entry in cuda_entries.
 */
static __always_inline int cuda_entry(struct pt_regs *ctx, __u64 *cookie)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct mcp_call_key key = { .tid = (__u32)id, .probe_id = mcp_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) };
	struct mcp_probe_config *cfg;
	struct mcp_cuda_entry entry = {};
	__u64 sp;

	if (cookie)
		*cookie = 0; /* 0: the return looks for a cuda_entries entry */
	if (!mcp_wanted(id >> 32))
		return MCP_RETURN_SKIPPED;
	cfg = bpf_map_lookup_elem(&probe_configs, &key.probe_id);
	if (!cfg)
		return MCP_RETURN_SKIPPED;
	if (cfg->cuda_flags & (MCP_CUDA_CFG_DRIVER_LAUNCH | MCP_CUDA_CFG_MARK_THREAD)) {
		struct task_struct *task = mcp_current();

		if (nested_in_runtime(task, id >> 32, cfg, key.sp))
			return MCP_RETURN_SKIPPED;
		mark_runtime_call(task, cfg, key.sp);
	}
	mcp_read_args(ctx, entry.regs);
	/* entry.ktime_ns stays 0 (no clock read) until something needs the time:
	 * the nesting check, slow mode, a sampled-in call or a timed launch */

	if (folds_nested(cfg)) {
		__u32 tid = key.tid;
		struct mcp_launch_owner *owner = bpf_map_lookup_elem(&cuda_launch_owner, &tid);
		/* nested in another launch probe: that one reports the launch. An owner
		 * older than a second is a leftover of a call that never returned. */
		if (owner && mcp_now(&entry.ktime_ns) - owner->ktime_ns < 1000000000ULL)
			return MCP_RETURN_SKIPPED;
		struct mcp_launch_owner me = { .probe_id = key.probe_id, .ktime_ns = mcp_now(&entry.ktime_ns) };
		bpf_map_update_elem(&cuda_launch_owner, &tid, &me, BPF_ANY);
	}

	{
		/* slow mode: rate 1 for this process until the hold ends; it replaces
		 * only the probability step, the probe's scope and quota still hold */
		bool slow = cuda_slow_ns && is_launch(cfg->cuda_api) && in_slow_mode(id >> 32, &entry.ktime_ns);
		/* no trace id (NULL): CUDA API arguments are not trace ids, and parsing
		 * one does not fit this program's stack next to the return's */
		enum mcp_decision d = mcp_sample(key.probe_id, entry.regs, &entry.ktime_ns, slow,
						 &entry.threshold, &entry.flags, NULL);

		if (d == MCP_SAMPLED_OUT && cuda_slow_ns && is_launch(cfg->cuda_api)) {
			/* a launch the sampler dropped is still timed: if it turns out slow,
			 * the return keeps it and switches the process to slow mode */
			mcp_now(&entry.ktime_ns);
			entry.flags |= MCP_ENTRY_SAMPLED_OUT;
			if (cookie) {
				struct mcp_cuda_timed *t = bpf_task_storage_get(
					&cuda_timed, mcp_current(), 0,
					BPF_LOCAL_STORAGE_GET_F_CREATE);
				if (t) {
					t->key = key;
					__builtin_memcpy(t->regs, entry.regs, sizeof(t->regs));
				}
				*cookie = entry.ktime_ns;
				return MCP_RETURN_WANTED;
			}
		} else if (d != MCP_KEEP) {
			/* the owner set above must still be cleared by this call's return */
			return folds_nested(cfg) ? MCP_RETURN_WANTED : MCP_RETURN_SKIPPED;
		}
	}

	/* the return address sits at sp; stack arguments follow it */
	sp = PT_REGS_SP(ctx);
	bpf_probe_read_user(entry.stack_args, sizeof(entry.stack_args), (void *)(sp + 8));
	if (cfg->entry_deref_arg)
		bpf_probe_read_user(entry.deref, sizeof(entry.deref),
				    (void *)arg_at(entry.regs, cfg->entry_deref_arg));
	/* bpf_find_vma takes the mmap lock (the cache spares most launches it): a
	 * launch timed only for slow detection locates its kernel at return, and only
	 * if it turns out slow */
	if (cfg->vma_arg && !(entry.flags & MCP_ENTRY_SAMPLED_OUT)) {
		struct vma_lookup l = { .addr = arg_at(entry.regs, cfg->vma_arg) };
		if (locate_code_cached(mcp_current(), id >> 32, &l) == 0) {
			entry.code_file_offset = l.file_offset;
			entry.code_inode = l.inode;
		}
	}
	bpf_map_update_elem(&cuda_entries, &key, &entry, BPF_ANY);
	return MCP_RETURN_WANTED;
}

/*
 * A launch reported at its entry (MCP_CUDA_CFG_AT_ENTRY: no --cuda-latency, no
 * slow-launch detection): the one program the launch runs, kept or not. The
 * record (struct mcp_cuda_launch_event, MCP_KIND_CUDA_LAUNCH) is built here:
 * registers, stack arguments, the entry deref and the host function's place; no
 * ret and no duration (the flags say so). The path is counted in helper calls,
 * each a kernel call and return (dear with return-thunk mitigations).
 */
static __always_inline int cuda_launch_at_entry(struct pt_regs *ctx)
{
	struct task_struct *task = mcp_current();
	__u64 id = mcp_pid_tgid(task), now = 0, threshold;
	__u32 probe_id = mcp_cookie(ctx), flags;
	struct mcp_probe_config *cfg;
	struct mcp_cuda_launch_event *e;
	__u64 regs[MCP_MAX_ARGS], stack_args[3], sp = PT_REGS_SP(ctx);

	/* one load of sp: clang may otherwise pick between ctx offsets, a ctx pointer the
	 * verifier refuses to dereference */
	barrier_var(sp);
	if (!mcp_wanted(id >> 32))
		return 0;
	cfg = bpf_map_lookup_elem(&probe_configs, &probe_id);
	if (!cfg)
		return 0;
	if (cfg->cuda_flags & (MCP_CUDA_CFG_DRIVER_LAUNCH | MCP_CUDA_CFG_MARK_THREAD)) {
		if (nested_in_runtime(task, id >> 32, cfg, sp))
			return 0;
		mark_runtime_call(task, cfg, sp);
	}
	mcp_read_args(ctx, regs);
	if (mcp_sample(probe_id, regs, &now, false, &threshold, &flags, NULL) != MCP_KEEP)
		return 0;
	/* the return address sits at sp; stack arguments follow it. Read into this
	 * program's stack, not the ring: hardened usercopy checks a stack destination
	 * in a few compares, a vmalloc'ed one through more calls. A fault zeroes it. */
	bpf_probe_read_user(stack_args, sizeof(stack_args), (void *)(sp + 8));
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		mcp_count(probe_id, lost);
		return 0;
	}
	mcp_fill_header_of(&e->hdr, task, id, probe_id, MCP_KIND_CUDA_LAUNCH, now, threshold, flags,
			   sizeof(*e));
	__builtin_memcpy(e->regs, regs, sizeof(e->regs));
	__builtin_memcpy(e->stack_args, stack_args, sizeof(e->stack_args));
	if (!cfg->entry_deref_arg ||
	    bpf_probe_read_user(e->deref, sizeof(e->deref), (void *)arg_at(regs, cfg->entry_deref_arg)))
		__builtin_memset(e->deref, 0, sizeof(e->deref));
	e->code_file_offset = 0;
	e->code_inode = 0;
	if (cfg->vma_arg) {
		struct vma_lookup l = { .addr = arg_at(regs, cfg->vma_arg) };
		if (locate_code_cached(task, id >> 32, &l) == 0) {
			e->code_file_offset = l.file_offset;
			e->code_inode = l.inode;
		}
	}
	e->api = cfg->cuda_api;
	e->pad = 0;
	bpf_ringbuf_submit(e, mcp_wakeup_flags(sizeof(*e)));
	return 0;
}

/*
 * Return of a launch timed only for slow detection (uprobe session, start in
 * the cookie). Not slow: nothing to do. Slow: rebuild its entry from the
 * thread's cuda_timed slot (registers; stack arguments and the entry deref are
 * read now, from the caller's frame and memory, which the call leaves in
 * place) so the common return path keeps and names it.
 */
static __always_inline struct mcp_cuda_entry *cuda_timed_entry(struct mcp_call_key *key,
							       __u64 start, __u64 now,
							       const struct mcp_probe_config *cfg,
							       struct mcp_cuda_entry *scratch)
{
	struct mcp_cuda_timed *t;

	if (now - start < cuda_slow_ns)
		return NULL;
	__builtin_memset(scratch, 0, sizeof(*scratch));
	scratch->ktime_ns = start;
	scratch->flags = MCP_ENTRY_SAMPLED_OUT;
	t = bpf_task_storage_get(&cuda_timed, mcp_current(), 0, 0);
	if (t && t->key.tid == key->tid && t->key.probe_id == key->probe_id && t->key.sp == key->sp) {
		__builtin_memcpy(scratch->regs, t->regs, sizeof(scratch->regs));
		bpf_probe_read_user(scratch->stack_args, sizeof(scratch->stack_args), (void *)(key->sp + 8));
		if (cfg->entry_deref_arg)
			bpf_probe_read_user(scratch->deref, sizeof(scratch->deref),
					    (void *)arg_at(scratch->regs, cfg->entry_deref_arg));
	}
	return scratch;
}

static __always_inline int cuda_return(struct pt_regs *ctx, __u64 *cookie)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct mcp_call_key key = { .tid = (__u32)id, .probe_id = mcp_cookie(ctx),
				    .sp = PT_REGS_SP(ctx) - MCP_RET_SP_ADJUST };
	struct mcp_probe_config *cfg = bpf_map_lookup_elem(&probe_configs, &key.probe_id);
	struct mcp_cuda_entry *entry, scratch;
	struct mcp_cuda_event *e;
	__u64 now = 0, duration, threshold;
	__u32 flags;

	if (cfg && folds_nested(cfg)) {
		__u32 tid = key.tid;
		struct mcp_launch_owner *owner = bpf_map_lookup_elem(&cuda_launch_owner, &tid);
		if (owner && owner->probe_id == key.probe_id)
			bpf_map_delete_elem(&cuda_launch_owner, &tid);
	}
	if (!cfg)
		return 0;
	if (cookie && *cookie) {
		/* timed only: no map entry; a launch that was not slow ends here */
		entry = cuda_timed_entry(&key, *cookie, mcp_now(&now), cfg, &scratch);
	} else {
		entry = bpf_map_lookup_elem(&cuda_entries, &key);
	}
	if (!entry)
		return 0;
	mcp_now(&now);
	duration = now - entry->ktime_ns;
	flags = entry->flags | MCP_EV_HAS_RET | MCP_EV_HAS_DURATION;
	threshold = entry->threshold;
	if (cuda_slow_ns && is_launch(cfg->cuda_api) && duration >= cuda_slow_ns) {
		__u32 tgid = id >> 32;
		__u64 until = now + cuda_hold_ns;
		bpf_map_update_elem(&cuda_slow_until, &tgid, &until, BPF_ANY);
		flags |= MCP_EV_SLOW_MODE;
		if (flags & MCP_ENTRY_SAMPLED_OUT) {
			/* kept for being slow, not by the draw: weight 1, within the quota */
			if (mcp_admit(mcp_counters_of(key.probe_id),
				      quotas_enabled ? mcp_tenant_id() : 0, &now) != MCP_KEEP) {
				bpf_map_delete_elem(&cuda_entries, &key);
				return 0;
			}
			threshold = MCP_KEEP_ALL;
		}
	} else if (flags & MCP_ENTRY_SAMPLED_OUT) {
		bpf_map_delete_elem(&cuda_entries, &key);
		return 0;
	}
	flags &= ~MCP_ENTRY_SAMPLED_OUT;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		mcp_count(key.probe_id, lost);
		bpf_map_delete_elem(&cuda_entries, &key);
		return 0;
	}
	mcp_fill_header(&e->hdr, id, key.probe_id, MCP_KIND_CUDA, entry->ktime_ns, threshold, flags,
			sizeof(*e));
	__builtin_memcpy(e->regs, entry->regs, sizeof(e->regs));
	__builtin_memcpy(e->stack_args, entry->stack_args, sizeof(e->stack_args));
	__builtin_memcpy(e->deref, entry->deref, sizeof(e->deref));
	if (cfg->ret_deref_arg)
		bpf_probe_read_user(&e->deref[0], sizeof(e->deref[0]),
				    (void *)arg_at(entry->regs, cfg->ret_deref_arg));
	e->ret = (__s64)(int)PT_REGS_RC(ctx); /* cudaError_t / CUresult are 32-bit enums */
	e->duration_ns = duration;
	e->code_file_offset = entry->code_file_offset;
	e->code_inode = entry->code_inode;
	if (cfg->vma_arg && (entry->flags & MCP_ENTRY_SAMPLED_OUT)) {
		struct vma_lookup l = { .addr = arg_at(entry->regs, cfg->vma_arg) };
		if (mcp_find_vma_in(mcp_current(), l.addr, &l) == 0) {
			e->code_file_offset = l.file_offset;
			e->code_inode = l.inode;
		}
	}
	e->api = cfg->cuda_api;
	e->stack_depth = 0;
	/* a name registration (cuModuleGetFunction, cuLibraryGetKernel): the caller's
	 * string is still in place at return; a failed read leaves it zeroed */
	if (cfg->name_arg)
		bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)arg_at(entry->regs, cfg->name_arg));
	if (flags & MCP_EV_SLOW_MODE) {
		long n = bpf_get_stack(ctx, e->user_stack, sizeof(e->user_stack), BPF_F_USER_STACK);
		e->stack_depth = n > 0 ? (__u32)((__u64)n >> 3) : 0;
	}
	bpf_ringbuf_submit(e, mcp_wakeup_flags(sizeof(*e)));
	bpf_map_delete_elem(&cuda_entries, &key);
	return 0;
}

#endif /* MCP_CUDA_CALL_BPF_H */
