/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mcp_abi.h: the one definition of everything the BPF programs and the agent
 * exchange: ring-buffer records, map keys and values, counter indexes.
 * Fixed-width types and explicit padding only; sizes are asserted on both sides.
 * Userspace includes this file as is (never redefine these structs).
 */
#ifndef MCP_ABI_H
#define MCP_ABI_H

#ifdef __cplusplus
#include <linux/types.h>
#define MCP_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MCP_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* probe ids are 1..MCP_MAX_PROBES-1; 0 is "none". The maps indexed by probe id are sized
 * at load (SessionOptions::probe_slots), at most this. */
#define MCP_MAX_PROBES 8448
/* A configuration holds at most this many uprobes and syscalls: a reload stages its new
 * probes beside the running ones before detaching those, so replacing every probe of the
 * largest configuration needs twice this, and the rest is left to CUDA and `trace` flags. */
#define MCP_MAX_CONFIGURED_PROBES 4096
#define MCP_MAX_ARGS 6          /* integer argument registers captured (SysV ABI) */
#define MCP_TENANT_BUCKETS 64   /* cgroup ids hashed (FNV-1a 64) into this many quota buckets */
#define MCP_MAX_SCOPE_CGROUPS 8192 /* scope_cgroups entries: tenant and probe-scope cgroups */
#define MCP_MAX_CGROUP_LEVEL 31 /* deepest cgroup level whose ancestors are matched */
#define MCP_COMM_LEN 16
#define MCP_MAX_STACK_DEPTH 32  /* user stack frames captured for slow CUDA launches */
#define MCP_MAX_TRACE_PREFIXES 256 /* trace-id prefix rules (slots 1..255; 0 is "none") */
#define MCP_MAX_STR_ARGS 3      /* string arguments a USDT record carries */
#define MCP_STR_ARG_LEN 128     /* bytes of each, NUL included (longer ones are cut) */

/* Kind of a record; selects the payload that follows the header. */
enum mcp_kind {
	MCP_KIND_UPROBE = 0,    /* function entry: args */
	MCP_KIND_URETPROBE = 1, /* function return: args, ret, duration */
	MCP_KIND_SYSCALL = 2,   /* syscall exit: args, ret; duration with --latency */
	MCP_KIND_CUDA = 3,      /* CUDA API call: struct mcp_cuda_event */
	MCP_KIND_CUDA_LAUNCH = 4, /* CUDA launch reported at its entry: struct mcp_cuda_launch_event */
	MCP_KIND_USDT = 5,      /* USDT probe hit: struct mcp_usdt_event */
};

/*
 * Per-probe counters: one struct per probe (and per tenant bucket) in a per-CPU
 * array, every field bumped with an atomic add (uprobe programs run with only
 * migration disabled, so a plain read-modify-write on this CPU's slot can be
 * interleaved by another program and lose an update). The agent sums the CPUs.
 * Invariants once the probe is detached and the ring drained:
 *   seen >= kept + quota_dropped
 *   kept == delivered + lost + orphaned   (delivered counted by the agent)
 */
struct mcp_counters {
	__u64 seen;          /* calls in scope that reached the probability step */
	__u64 kept;          /* calls kept (sampled in and within quota) */
	__u64 lost;          /* kept, but bpf_ringbuf_reserve failed: ring buffer full */
	__u64 quota_dropped; /* sampled in, then dropped by the tenant quota */
	__u64 orphaned;      /* kept at entry, the return never paired (longjmp, exit, no room) */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_counters) == 40, "mcp_counters layout");

/* Key of a call waiting for its return (uretprobe and CUDA entry maps). */
struct mcp_call_key {
	__u32 tid;      /* kernel pid of the thread */
	__u32 probe_id;
	__u64 sp;       /* user stack pointer at entry (x86-64: the return address's slot) */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_call_key) == 16, "mcp_call_key layout");

/* Record flags. */
#define MCP_EV_HAS_RET (1u << 0)
#define MCP_EV_HAS_DURATION (1u << 1)
#define MCP_EV_CONSISTENT (1u << 2) /* decided on the trace id, not a random draw */
#define MCP_EV_SLOW_MODE (1u << 3)  /* CUDA: taken while the process was in slow-launch mode */
#define MCP_EV_HAS_STACK (1u << 4)  /* call and USDT records: a struct mcp_stack follows the record */
#define MCP_EV_WINDOWED (1u << 5)   /* kept inside a sampling window: its threshold is the in-window
                                     * rate p / f, and the agent scales it by the coverage f */

/* mcp_probe_config.stack: which stacks a kept event of the probe carries. */
#define MCP_STACK_USER (1u << 0)
#define MCP_STACK_KERNEL (1u << 1)

/* One user frame as bpf_get_stack(BPF_F_USER_BUILD_ID) gives it (struct bpf_stack_build_id):
 * the kernel resolves the file's build id and the frame's offset in it while the process is
 * alive, so a process that exits before the agent reads its stack still has module + offset. */
#define MCP_BUILD_ID_SIZE 20
enum mcp_build_id_status {
	MCP_BUILD_ID_EMPTY = 0, /* no frame */
	MCP_BUILD_ID_VALID = 1, /* build_id and offset (in the file) are set */
	MCP_BUILD_ID_IP = 2,    /* the file could not be read (no build id, paged out): ip only */
};
struct mcp_build_id_frame {
	__s32 status;
	__u8 build_id[MCP_BUILD_ID_SIZE];
	__u64 offset_or_ip;
};
MCP_STATIC_ASSERT(sizeof(struct mcp_build_id_frame) == 32, "mcp_build_id_frame layout");

/* The stacks of a kept event (MCP_EV_HAS_STACK), taken after the sampling decision. User
 * frames are unwound through frame pointers, as bpftrace's ustack; the innermost first. */
struct mcp_stack {
	__u16 user_frames;   /* entries of user_ips and user_ids */
	__u16 kernel_frames; /* entries of kernel_ips */
	__u32 pad;
	__u64 user_ips[MCP_MAX_STACK_DEPTH];
	__u64 kernel_ips[MCP_MAX_STACK_DEPTH];
	struct mcp_build_id_frame user_ids[MCP_MAX_STACK_DEPTH];
};
MCP_STATIC_ASSERT(sizeof(struct mcp_stack) == 8 + 2 * 8 * MCP_MAX_STACK_DEPTH + 32 * MCP_MAX_STACK_DEPTH,
		  "mcp_stack layout");

/*
 * Outcome of the sampling decision, shared by every program family. Slow-launch
 * mode overrides only MCP_SAMPLED_OUT; scope and quota always hold.
 */
enum mcp_decision {
	MCP_NOT_OURS = 0,    /* out of scope (pid tree, cgroup): not counted at all */
	MCP_SAMPLED_OUT = 1, /* counted seen; the probability step dropped it */
	MCP_QUOTA_DROP = 2,  /* counted seen and quota_dropped */
	MCP_KEEP = 3,        /* counted seen and kept */
};

/* Common header of every ring-buffer record. */
struct mcp_event_header {
	__u64 ktime_ns;        /* bpf_ktime_get_ns() at the event (CLOCK_MONOTONIC), ns */
	__u64 cgroup_id;       /* cgroup v2 id of the task (its own cgroup, not its tenant's) */
	__u64 threshold;       /* sampling threshold that kept it: p = threshold / 2^64, ~0 = 1 */
	__u32 pid;             /* tgid */
	__u32 tid;             /* kernel pid of the thread */
	__u32 probe_id;        /* index into the agent's probe table */
	__u16 kind;            /* enum mcp_kind */
	__u16 cpu;             /* CPU the event fired on */
	__u32 flags;           /* MCP_EV_* */
	__u32 size;            /* bytes in this record, header included */
	char comm[MCP_COMM_LEN]; /* task comm at the event */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_event_header) == 64, "mcp_event_header layout");

/* Function or syscall call; kinds UPROBE, URETPROBE, SYSCALL. */
struct mcp_call_event {
	struct mcp_event_header hdr;
	__u64 args[MCP_MAX_ARGS]; /* integer args in ABI order (rdi rsi rdx rcx r8 r9 / syscall args) */
	__s64 ret;                /* return value (valid with MCP_EV_HAS_RET) */
	__u64 duration_ns;        /* entry to return, ns (valid with MCP_EV_HAS_DURATION) */
	__u64 trace_id[2];        /* with MCP_EV_CONSISTENT: the W3C trace id the decision used, as
	                           * big-endian halves ([0] = bytes 0..7, [1] = bytes 8..15: its
	                           * low 56 bits are OTel's R); N:u64 ids are {0, arg}. Else 0. */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_call_event) == 144, "mcp_call_event layout");

/*
 * A USDT probe hit: the call record (args = the probe's arguments as its note's argument
 * specs decode them, at most MCP_MAX_ARGS) plus the strings read through the arguments
 * mcp_probe_config.string_args names, in argument order, MCP_MAX_STR_ARGS at most.
 */
struct mcp_usdt_event {
	struct mcp_call_event call;
	__u8 nargs;               /* arguments the probe declares (its note), may exceed MCP_MAX_ARGS */
	__u8 str_args;            /* bit N: argument N was read as a string into the next str[] slot */
	__u8 str_ok;              /* bit N: ... and the read succeeded (else the slot is empty) */
	__u8 pad[5];
	char str[MCP_MAX_STR_ARGS][MCP_STR_ARG_LEN]; /* NUL-terminated, truncated, untrusted bytes */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_usdt_event) == 152 + MCP_MAX_STR_ARGS * MCP_STR_ARG_LEN,
		  "mcp_usdt_event layout");

/* The same records with their stacks (MCP_EV_HAS_STACK). */
struct mcp_call_stack_event {
	struct mcp_call_event call;
	struct mcp_stack stack;
};
struct mcp_usdt_stack_event {
	struct mcp_usdt_event usdt;
	struct mcp_stack stack;
};

/* Run-time configuration of one probe, in the `probe_configs` array map. */
struct mcp_probe_config {
	__u64 threshold;       /* keep when draw < threshold; ~0 keeps all, 0 keeps none */
	__u8 trace_id_arg;     /* 0: random draw; N+1: argument N points at the trace id */
	__u8 trace_id_format;  /* enum mcp_trace_id_format */
	/* CUDA probes only: */
	__u8 cuda_api;         /* enum mcp_cuda_api */
	__u8 vma_arg;          /* N+1: argument N is a code address to locate (file, offset) */
	__u8 entry_deref_arg;  /* N+1: copy MCP_CUDA_DEREF_BYTES through argument N at entry */
	__u8 ret_deref_arg;    /* N+1: copy 8 bytes through argument N at return */
	__u8 cuda_flags;       /* MCP_CUDA_CFG_* */
	__u8 name_arg;         /* N+1: copy the NUL-terminated string at argument N into name at return */
	__u64 cgroup_id;       /* 0 = any task; MCP_CGROUP_SCOPE_SET: only tasks in or below a
	                        * cgroup of scope_cgroups under this probe id (a cgroup path or
	                        * container selector, a pod or namespace, a container probe's
	                        * containers) */
	__u8 string_args;      /* USDT probes: bit N reads argument N as a string (first
	                        * MCP_MAX_STR_ARGS bits set) */
	__u8 stack;            /* uprobe, syscall and USDT probes: MCP_STACK_* */
	__u8 pad[6];
	__u64 window_end_ns;   /* a probe sampled in time windows, while one is open: keep nothing
	                        * after this CLOCK_MONOTONIC ns, however late the detach comes, and
	                        * mark what is kept MCP_EV_WINDOWED; 0: not in a window (calls are
	                        * sampled at `threshold` alone) */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_probe_config) == 40, "mcp_probe_config layout");

/* mcp_probe_config.cgroup_id of a probe scoped to cgroups; no cgroup has this id. */
#define MCP_CGROUP_SCOPE_SET (~0ULL)

/*
 * A trace-id prefix rule (BPF_MAP_TYPE_LPM_TRIE trace_prefixes): the longest entry matching
 * (probe id, the decision's trace id) gives the threshold the probe decides with. prefixlen
 * counts bits of probe_id then id: 32 + 4 x the prefix's hex digits, so a rule never matches
 * another probe. probe_id is in host order (both sides write it whole); id is the W3C trace
 * id's 16 bytes as written (big-endian).
 */
struct mcp_prefix_key {
	__u32 prefixlen;
	__u32 probe_id;
	__u8 id[16];
};
MCP_STATIC_ASSERT(sizeof(struct mcp_prefix_key) == 24, "mcp_prefix_key layout");

struct mcp_prefix_rule {
	__u64 threshold;       /* as mcp_probe_config.threshold, for the ids under the prefix */
	__u32 slot;            /* 1..MCP_MAX_TRACE_PREFIXES-1: its prefix_counters index */
	__u32 pad;             /* zero */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_prefix_rule) == 16, "mcp_prefix_rule layout");

/*
 * Key of scope_cgroups (bpf/maps.bpf.h), the one table of cgroup scopes: a cgroup (v2 id)
 * that is a tenant (probe_id 0; the value is the tenant id the quota bucket hashes) or in
 * probe N's scope (probe_id N; the value is 1). A task matches through its own cgroup or
 * any ancestor, the deepest entry first.
 */
struct mcp_scope_key {
	__u32 probe_id;  /* 0: tenant; N: scope of probe N */
	__u32 pad;       /* zero */
	__u64 cgroup_id; /* cgroup v2 id */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_scope_key) == 16, "mcp_scope_key layout");

/* A launch API of a file where one probed launch API calls another (a
 * __cudaLaunchKernel that is more than a jump to cudaLaunchKernel): these
 * probes share a per-thread owner so the nested call is not a second launch.
 * Without it (the common case) a launch costs no owner bookkeeping. */
#define MCP_CUDA_CFG_FOLD_NESTED (1u << 0)
/* A launch reported at its entry (the default without --cuda-latency or slow-launch
 * detection): one program, no return probe, so the record has no ret and no duration
 * (MCP_EV_HAS_RET and MCP_EV_HAS_DURATION clear). */
#define MCP_CUDA_CFG_AT_ENTRY (1u << 1)
/* A driver launch API (cuLaunchKernel[Ex][_ptsz]): skipped, not even counted seen, when
 * its caller is a CUDA runtime (a file in cuda_runtime_files) doing a launch the
 * application made through the runtime: each launch is one event, at the level the
 * application called. */
#define MCP_CUDA_CFG_DRIVER_LAUNCH (1u << 2)
/* A runtime launch API in a file that also holds application code (an executable with the
 * static runtime): it records the thread's call (struct mcp_runtime_call) so a driver
 * launch made from that file is skipped only while this launch is in progress. */
#define MCP_CUDA_CFG_MARK_THREAD (1u << 3)

/* A file as the kernel names it: super block dev (MKDEV: major << 20 | minor) and inode. */
struct mcp_file_key {
	__u64 dev;
	__u64 ino;
};
MCP_STATIC_ASSERT(sizeof(struct mcp_file_key) == 16, "mcp_file_key layout");

/* cuda_runtime_files values: how a driver launch called from that file is recognised. */
enum mcp_runtime_file {
	MCP_RUNTIME_SHARED = 1, /* a runtime library: every driver launch it makes is nested */
	MCP_RUNTIME_STATIC = 2, /* runtime and application code in one file: only while a
	                         * marked runtime launch of the thread is in progress */
};

/*
 * A CUDA runtime or driver library mapped executable by a process (the lib_events ring):
 * the agent's discovery attaches the CUDA probes to libraries loaded at run time, from
 * any path (pip wheels, conda, the driver's folder), the first time it sees each file.
 * ino 0: a mapping the kernel could not look at (its mmap lock was busy); the agent reads
 * the process's maps for CUDA libraries instead.
 */
#define MCP_LIB_NAME_LEN 64
struct mcp_lib_mapped {
	__u64 ktime_ns;   /* when the mapping was made */
	__u64 dev;        /* the file, as struct mcp_file_key */
	__u64 ino;
	__u64 start;      /* the executable mapping's start address */
	__u32 pid;        /* tgid of the process that mapped it */
	__u32 pad;
	char name[MCP_LIB_NAME_LEN]; /* file name (no directory), NUL-terminated */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_lib_mapped) == 40 + MCP_LIB_NAME_LEN, "mcp_lib_mapped layout");

enum mcp_trace_id_format {
	MCP_TRACE_ID_HEX32 = 0,   /* pointer to 32 lowercase/uppercase hex characters */
	MCP_TRACE_ID_BYTES16 = 1, /* pointer to 16 raw bytes */
	MCP_TRACE_ID_INTEGER = 2, /* the argument itself; its low 56 bits are the randomness */
};

/*
 * Token bucket of one tenant bucket on one CPU (a per-CPU map value: the agent
 * splits the node-wide quota over the CPUs by recent demand every tick).
 */
struct mcp_quota_config {
	__u64 rate_milli;      /* this CPU's refill, thousandths of an event per second */
	__u64 burst_milli;     /* this CPU's capacity, thousandths of an event; 0 = no quota */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_quota_config) == 16, "mcp_quota_config layout");

struct mcp_quota_state {
	__u64 tokens_milli;    /* tokens x 1000 */
	__u64 last_ns;         /* last refill time */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_quota_state) == 16, "mcp_quota_state layout");

/*
 * CUDA API calls. The entry program captures the six integer argument
 * registers and the next three stack slots raw; the agent decodes them per API
 * following the x86-64 SysV ABI, where a dim3 passed by value takes two
 * registers (x | y << 32 in one, z in the next):
 *   cudaLaunchKernel[_ptsz](func, grid.xy, grid.z, block.xy, block.z, args | shmem, stream)
 *     regs: rdi=func rsi=grid.xy rdx=grid.z rcx=block.xy r8=block.z r9=args;
 *     stack_args[0]=sharedMem stack_args[1]=stream
 *   __cudaLaunchKernel[_ptsz](kernel handle, ...): same layout, rdi is a cudaKernel_t
 *     whose host function came from __cudaGetKernel(&handle, func) (CUDA >= 12.x launches)
 *   cudaLaunchKernelExC[_ptsz](const cudaLaunchConfig_t *config, func, args):
 *     deref = *config: gridDim (12 bytes) blockDim (12) pad (8 aligned) dynamicSmemBytes stream
 *   cuLaunchKernel(f, gx, gy, gz, bx, by | bz, shmem, stream, params, extra):
 *     regs: f gx gy gz bx by; stack_args: bz sharedMemBytes hStream
 *   cudaMemcpy(dst, src, count, kind) / cudaMemcpyAsync(..., stream): rdx=count rcx=kind r8=stream
 *   cudaMalloc(void **devPtr, size): rsi=size; ret_deref = *devPtr at return
 *   cudaFree(ptr), cudaStreamSynchronize(stream), cudaDeviceSynchronize(),
 *   cudaGraphLaunch(graphExec, stream)
 *   cuLaunchKernelEx(const CUlaunchConfig *config, f, params, extra):
 *     deref = *config: gridDimX..Z blockDimX..Z (6 x 4 bytes) sharedMemBytes (4) pad (4) hStream
 * Bookkeeping (internal, kept at rate 1, never shown; the agent keeps the maps):
 *   __cudaGetKernel(&handle, func): ret_deref = handle, code_* = func's place
 *   cuModuleGetFunction(CUfunction *f, mod, name) / cuLibraryGetKernel(CUkernel *k, lib, name):
 *     ret_deref = the handle written, name = the kernel's (mangled) name
 *   cuKernelGetFunction(CUfunction *f, CUkernel k): ret_deref = f, rsi = k
 *   cudaGraphCreate(cudaGraph_t *g, flags): ret_deref = the graph, created empty
 *   cudaStreamEndCapture(stream, cudaGraph_t *g): ret_deref = the captured graph
 *   cudaGraphAddKernelNode(node *, graph, ...): rsi = graph
 *   cudaGraphInstantiate[WithFlags|WithParams](cudaGraphExec_t *e, graph, ...): ret_deref = e, rsi = graph
 */
enum mcp_cuda_api {
	MCP_CUDA_LAUNCH = 1,        /* host function pointer in rdi */
	MCP_CUDA_LAUNCH_HANDLE = 2, /* cudaKernel_t in rdi */
	MCP_CUDA_LAUNCH_EXC = 3,
	MCP_CUDA_CU_LAUNCH = 4,
	MCP_CUDA_MEMCPY = 5,
	MCP_CUDA_MEMCPY_ASYNC = 6,
	MCP_CUDA_MALLOC = 7,
	MCP_CUDA_FREE = 8,
	MCP_CUDA_STREAM_SYNC = 9,
	MCP_CUDA_DEVICE_SYNC = 10,
	MCP_CUDA_GRAPH_LAUNCH = 11,
	MCP_CUDA_GET_KERNEL = 12,   /* internal: maps a kernel handle to its host function */
	MCP_CUDA_CU_LAUNCH_EX = 13,
	MCP_CUDA_GET_FUNCTION = 14, /* internal: names a driver function or kernel handle */
	MCP_CUDA_KERNEL_FUNCTION = 15, /* internal: a CUfunction for a named CUkernel */
	MCP_CUDA_GRAPH_NEW = 16,    /* internal: a graph created empty */
	MCP_CUDA_GRAPH_ADD_KERNEL = 17, /* internal: one kernel node more in a graph */
	MCP_CUDA_GRAPH_INSTANTIATE = 18, /* internal: an executable graph of a graph */
	MCP_CUDA_GRAPH_CAPTURED = 19, /* internal: a graph made by stream capture */
};

#define MCP_CUDA_DEREF_BYTES 40

struct mcp_cuda_event {
	struct mcp_event_header hdr;
	__u64 regs[MCP_MAX_ARGS];   /* integer argument registers at entry */
	__u64 stack_args[3];        /* 7th..9th integer arguments (stack) */
	__u64 deref[MCP_CUDA_DEREF_BYTES / 8]; /* entry or return deref, see mcp_probe_config */
	__s64 ret;                  /* cudaError_t / CUresult (valid with MCP_EV_HAS_RET) */
	__u64 duration_ns;          /* API call latency, ns (valid with MCP_EV_HAS_DURATION) */
	__u64 code_file_offset;     /* vma_arg's address as an offset in its file */
	__u64 code_inode;           /* inode of that file (0: not file-backed) */
	__u32 api;                  /* enum mcp_cuda_api */
	__u32 stack_depth;          /* valid frames in user_stack */
	union {
		__u64 user_stack[MCP_MAX_STACK_DEPTH]; /* launches in slow mode only */
		char name[MCP_MAX_STACK_DEPTH * 8];    /* probes with name_arg: NUL-terminated, truncated */
	};
};
MCP_STATIC_ASSERT(sizeof(struct mcp_cuda_event) == 64 + 48 + 24 + 40 + 16 + 16 + 8 + 8 * MCP_MAX_STACK_DEPTH,
		  "mcp_cuda_event layout");

/*
 * A launch reported at its entry (MCP_CUDA_CFG_AT_ENTRY, the default): the fields of
 * struct mcp_cuda_event that exist at entry, same meanings, and nothing else (no ret,
 * no duration, no user stack or name). Less than half the size: each launch writes
 * fewer ring-buffer lines and the consumer is woken less often.
 */
struct mcp_cuda_launch_event {
	struct mcp_event_header hdr;
	__u64 regs[MCP_MAX_ARGS];
	__u64 stack_args[3];
	__u64 deref[MCP_CUDA_DEREF_BYTES / 8];
	__u64 code_file_offset;
	__u64 code_inode;
	__u32 api;                  /* enum mcp_cuda_api */
	__u32 pad;                  /* zero */
};
MCP_STATIC_ASSERT(sizeof(struct mcp_cuda_launch_event) == 64 + 48 + 24 + 40 + 16 + 8,
		  "mcp_cuda_launch_event layout");

#endif /* MCP_ABI_H */
