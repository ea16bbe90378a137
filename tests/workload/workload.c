/*
 * mcp-workload: a traced program with known behaviour, for tests, the demo and
 * benchmarks. Functions are noinline with stable symbols so uprobes attach.
 *   calls N            mcp_work(i, 2, 3, 4, 5, 6) N times
 *   sleep N US         mcp_sleep(US) N times (each sleeps US microseconds)
 *   getppid N          N getppid() syscalls
 *   rate R SECONDS [getppid]  mcp_work (or getppid) at about R calls/s for SECONDS
 *   traceid N [SEED [FORMAT [PER_SEC]]]  mcp_handle(trace_id, i) for N trace ids, each two
 *                      splitmix64 outputs hi, lo of SEED (tests recompute them); FORMAT
 *                      hex32 (default): a pointer to "%016llx%016llx" of hi, lo; bytes16: a
 *                      pointer to the 16 bytes hi, lo big-endian; u64: mcp_handle_u64(lo, i);
 *                      PER_SEC > 0 paces the calls at that many per second
 *   realtime N FILE    mcp_work N times, writing "before after" CLOCK_REALTIME ns per call
 *   demo SECONDS       a small mixed service: requests with latency, syscalls
 *   badcomm N          two threads make N getppid() calls each at the same time; the second
 *                      first names itself "\xff\xfe" (invalid UTF-8) with prctl(PR_SET_NAME)
 *   recurse N DEPTH [hold]  mcp_recurse(DEPTH) N times; it recurses to depth DEPTH and
 *                      returns DEPTH*(DEPTH+1)/2 (each frame n returns n(n+1)/2); with
 *                      "hold", then mcp_done() and wait for a signal (a tracer that names
 *                      stacks when it prints them needs the process alive)
 *   longjmp N          mcp_maybe_jump(i, i is even) N times: even calls longjmp out
 *                      (never return), odd ones return i
 *   fork N CALLS       N children (odd ones exec `calls CALLS`, even ones call
 *                      mcp_work CALLS times), then the parent does CALLS; waits all
 *   threads T N [getppid]  T threads started together, thread i pinned to CPU i mod
 *                      (CPUs), each calls mcp_work (or getppid) N times: several threads
 *                      per CPU and one per CPU at once, for counter exactness
 *   handoff CALLS      getppid every ms until SIGUSR1, then forks a child that calls
 *                      mcp_work(i, 7, ...) CALLS times, and exits at once (the child
 *                      outlives it); the child's pid goes to stdout
 *   usdt N             N times: USDT probe mcp:tick(i, name, bad, id) with name "even-I" or
 *                      "odd-I", bad an address nothing maps and id the splitmix64 sequence
 *                      of seed 1 (a trace id), then mcp:guarded(i) only
 *                      while its semaphore is set (a tracer attached); prints "guarded K"
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
/* Every probe of this file gets a semaphore (PROVIDER_NAME_semaphore), set while traced. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short mcp_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short mcp_guarded_semaphore __attribute__((unused)) __attribute__((section(".probes")));

#define NOINLINE __attribute__((noinline, used))

NOINLINE long mcp_work(long a, long b, long c, long d, long e, long f)
{
	__asm__ volatile("" ::: "memory");
	return a + b + c + d + e + f;
}

NOINLINE long mcp_sleep(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
	return 42;
}

NOINLINE int mcp_handle(const char *trace_id, long index)
{
	__asm__ volatile("" ::: "memory");
	return trace_id[0] + (int)index;
}

/* N:u64 trace ids: the argument itself is the id. */
NOINLINE long mcp_handle_u64(unsigned long trace_id, long index)
{
	__asm__ volatile("" ::: "memory");
	return (long)(trace_id & 1) + index;
}

struct hammer {
	pthread_barrier_t *start;
	long calls;
	int cpu;
	int syscalls;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	cpu_set_t set;
	long sum = 0;

	CPU_ZERO(&set);
	CPU_SET(h->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	pthread_barrier_wait(h->start);
	for (long i = 0; i < h->calls; i++)
		sum += h->syscalls ? getppid() : mcp_work(i, 2, 3, 4, 5, 6);
	return (void *)sum;
}

static void *badcomm_thread(void *arg)
{
	prctl(PR_SET_NAME, "\xff\xfe", 0, 0, 0);
	for (long i = 0; i < (long)arg; i++)
		getppid();
	return NULL;
}

NOINLINE void mcp_done(void)
{
	__asm__ volatile("" ::: "memory");
}

NOINLINE long mcp_recurse(long n)
{
	long inner = n > 1 ? mcp_recurse(n - 1) : 0;
	/* opaque to the optimiser: the recursion must not become a loop */
	__asm__ volatile("" : "+r"(inner) : : "memory");
	return n + inner;
}

static jmp_buf jump_env;

NOINLINE long mcp_maybe_jump(long i, long jump)
{
	__asm__ volatile("" ::: "memory");
	if (jump)
		longjmp(jump_env, 1);
	return i;
}

static volatile sig_atomic_t released;

static void on_usr1(int sig)
{
	(void)sig;
	released = 1;
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s calls|sleep|getppid|rate|traceid|realtime|demo|recurse|longjmp|fork|threads|handoff ARGS\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	long n = atol(argv[2]);
	long sum = 0;

	if (!strcmp(mode, "calls")) {
		for (long i = 0; i < n; i++)
			sum += mcp_work(i, 2, 3, 4, 5, 6);
	} else if (!strcmp(mode, "sleep") && argc > 3) {
		for (long i = 0; i < n; i++)
			sum += mcp_sleep(atol(argv[3]));
	} else if (!strcmp(mode, "getppid")) {
		for (long i = 0; i < n; i++)
			sum += getppid();
	} else if (!strcmp(mode, "rate") && argc > 3) {
		/* n calls/s for argv[3] seconds, paced in 1 ms slices */
		double secs = atof(argv[3]);
		uint64_t start = now_ns(CLOCK_MONOTONIC), done = 0;
		for (;;) {
			uint64_t el = now_ns(CLOCK_MONOTONIC) - start;
			if (el >= secs * 1e9)
				break;
			uint64_t due = (uint64_t)((double)el * n / 1e9);
			const int syscalls = argc > 4 && !strcmp(argv[4], "getppid");
			while (done < due)
				sum += syscalls ? (done++, getppid()) : mcp_work(done++, 2, 3, 4, 5, 6);
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
		printf("calls %llu\n", (unsigned long long)done);
	} else if (!strcmp(mode, "traceid")) {
		uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
		const char *format = argc > 4 ? argv[4] : "hex32";
		char id[33];
		if (strcmp(format, "hex32") && strcmp(format, "bytes16") && strcmp(format, "u64")) {
			fprintf(stderr, "traceid: format must be hex32, bytes16 or u64\n");
			return 2;
		}
		const double per_sec = argc > 5 ? atof(argv[5]) : 0;
		const uint64_t start = now_ns(CLOCK_MONOTONIC);
		for (long i = 0; i < n; i++) {
			/* sequenced: argument evaluation order is unspecified */
			unsigned long long hi = splitmix(&seed), lo = splitmix(&seed);
			while (per_sec > 0 && now_ns(CLOCK_MONOTONIC) - start < (uint64_t)(i * 1e9 / per_sec)) {
				struct timespec ts = { 0, 500000 };
				nanosleep(&ts, NULL);
			}
			if (!strcmp(format, "u64")) {
				sum += mcp_handle_u64(lo, i);
				continue;
			}
			if (!strcmp(format, "bytes16")) {
				for (int b = 0; b < 8; b++) {
					id[b] = (char)(hi >> (56 - 8 * b));
					id[8 + b] = (char)(lo >> (56 - 8 * b));
				}
			} else {
				snprintf(id, sizeof(id), "%016llx%016llx", hi, lo);
			}
			sum += mcp_handle(id, i);
		}
	} else if (!strcmp(mode, "realtime") && argc > 3) {
		FILE *f = fopen(argv[3], "w");
		if (!f)
			return 1;
		for (long i = 0; i < n; i++) {
			uint64_t before = now_ns(CLOCK_REALTIME);
			sum += mcp_work(i, 2, 3, 4, 5, 6);
			uint64_t after = now_ns(CLOCK_REALTIME);
			fprintf(f, "%llu %llu\n", (unsigned long long)before, (unsigned long long)after);
			struct timespec ts = { 0, 200000 };
			nanosleep(&ts, NULL);
		}
		fclose(f);
	} else if (!strcmp(mode, "badcomm")) {
		pthread_t t;
		if (pthread_create(&t, NULL, badcomm_thread, (void *)n) != 0)
			return 1;
		for (long i = 0; i < n; i++)
			sum += getppid();
		pthread_join(t, NULL);
	} else if (!strcmp(mode, "threads") && argc > 3) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		pthread_t t[64];
		struct hammer h[64];
		pthread_barrier_t start;
		if (n < 1 || n > 64 || cpus < 1)
			return 2;
		pthread_barrier_init(&start, NULL, (unsigned)n);
		for (long i = 0; i < n; i++) {
			h[i] = (struct hammer){ &start, atol(argv[3]), (int)(i % cpus),
						argc > 4 && !strcmp(argv[4], "getppid") };
			if (pthread_create(&t[i], NULL, hammer_thread, &h[i]) != 0)
				return 1;
		}
		for (long i = 0; i < n; i++) {
			void *r;
			pthread_join(t[i], &r);
			sum += (long)r;
		}
	} else if (!strcmp(mode, "demo")) {
		/* a toy request handler: latency varies, each request makes syscalls */
		uint64_t seed = 7, end = now_ns(CLOCK_MONOTONIC) + (uint64_t)(atof(argv[2]) * 1e9);
		while (now_ns(CLOCK_MONOTONIC) < end) {
			sum += mcp_work(splitmix(&seed) % 1000, 2, 3, 4, 5, 6);
			sum += mcp_sleep(1000 + splitmix(&seed) % 20000);
			sum += getppid();
		}
	} else if (!strcmp(mode, "recurse") && argc > 3) {
		for (long i = 0; i < n; i++)
			sum += mcp_recurse(atol(argv[3]));
		if (argc > 4 && !strcmp(argv[4], "hold")) {
			mcp_done();
			pause();
		}
	} else if (!strcmp(mode, "longjmp")) {
		for (volatile long i = 0; i < n; i++)
			if (!setjmp(jump_env))
				sum += mcp_maybe_jump(i, i % 2 == 0);
	} else if (!strcmp(mode, "fork") && argc > 3) {
		long calls = atol(argv[3]);
		for (long c = 0; c < n; c++) {
			pid_t pid = fork();
			if (pid == 0) {
				if (c % 2) {
					execl("/proc/self/exe", "mcp-workload", "calls", argv[3], (char *)NULL);
					_exit(127);
				}
				for (long i = 0; i < calls; i++)
					sum += mcp_work(i, 2, 3, 4, 5, 6);
				_exit(sum == 0x7fffffff);
			}
		}
		for (long i = 0; i < calls; i++)
			sum += mcp_work(i, 2, 3, 4, 5, 6);
		int st;
		while (wait(&st) > 0)
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				return 1;
	} else if (!strcmp(mode, "usdt")) {
		long guarded = 0;
		char name[32];
		uint64_t seed = 1;
		for (long i = 0; i < n; i++) {
			uint64_t id = splitmix(&seed);
			snprintf(name, sizeof(name), "%s-%ld", i % 2 ? "odd" : "even", i);
			DTRACE_PROBE4(mcp, tick, i, name, (const char *)16, id);
			if (mcp_guarded_semaphore) {
				DTRACE_PROBE1(mcp, guarded, i);
				guarded++;
			}
			sum += name[0];
		}
		printf("guarded %ld\n", guarded);
		fflush(stdout);
	} else if (!strcmp(mode, "handoff")) {
		signal(SIGUSR1, on_usr1);
		while (!released) {
			sum += getppid();
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
		pid_t pid = fork();
		if (pid == 0) {
			for (long i = 0; i < n; i++)
				sum += mcp_work(i, 7, 3, 4, 5, 6);
			_exit(sum == 0x7fffffff);
		}
		printf("%d\n", (int)pid);
		fflush(stdout);
	} else {
		fprintf(stderr, "%s: unknown mode or missing arguments\n", argv[0]);
		return 2;
	}
	return sum == 0x7fffffff; /* keep the work observable */
}
