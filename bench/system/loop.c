/*
 * bench/system/loop: the timed workload of bench/system/overhead.
 *   loop call N      N calls of the noinline function bench_work (uprobe target)
 *   loop getppid N   N getppid() syscalls (tracepoint target)
 *   loop paced N     N calls of bench_work, 100 us apart (PACED_GAP_US in the environment), each
 *                    timed alone: wall is the mean time inside one call, what a workload
 *                    that is not call-bound feels (a traced call's trap, or nothing outside
 *                    sampling windows)
 *   loop faults N    N rounds of mmap, touch and munmap of 16 pages, 100 us apart, each
 *                    timed: what a process feels of another's uprobe attach and detach (both
 *                    take the mmap lock of every process mapping the file); also prints
 *                    p99_ns and max_ns of one round
 * It prints "ready" once SIGUSR1 is blocked, waits for SIGUSR1 so a tracer can
 * attach to its pid first, runs the loop once, and prints one more line:
 *   wall_ns_per_call=X cpu_ns_per_call=Y calls=N
 * wall is CLOCK_MONOTONIC over the whole loop; cpu is this thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), which includes the in-kernel probe cost but not
 * the time the thread sat preempted by other load, so it is the less noisy
 * figure on a shared machine.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline, used)) long bench_work(long a, long b)
{
	__asm__ volatile("" ::: "memory");
	return a + b;
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "call") && strcmp(argv[1], "getppid") && strcmp(argv[1], "paced") &&
			  strcmp(argv[1], "faults"))) {
		fprintf(stderr, "usage: %s call|getppid|paced|faults N\n", argv[0]);
		return 2;
	}
	const long n = atol(argv[2]);
	const int syscalls = !strcmp(argv[1], "getppid");
	const int paced = !strcmp(argv[1], "paced");
	const int faults = !strcmp(argv[1], "faults");

	sigset_t set;
	int sig;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);

	volatile long sink = 0;
	const uint64_t w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	if (faults && n > 0) {
		uint64_t *each = calloc(n, sizeof(*each)), sum = 0;
		const struct timespec gap = { 0, 100000 };
		const size_t len = 16 * 4096;
		if (!each)
			return 1;
		for (long i = 0; i < n; i++) {
			const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
			char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				return 1;
			for (size_t off = 0; off < len; off += 4096)
				p[off] = 1;
			munmap(p, len);
			each[i] = now_ns(CLOCK_MONOTONIC) - t0;
			sum += each[i];
			nanosleep(&gap, NULL);
		}
		const uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
		qsort(each, n, sizeof(*each), cmp_u64);
		printf("wall_ns_per_call=%.2f cpu_ns_per_call=%.2f calls=%ld p99_ns=%llu max_ns=%llu\n", (double)sum / n,
		       (double)(c1 - c0) / n, n, (unsigned long long)each[n * 99 / 100], (unsigned long long)each[n - 1]);
		return 0;
	}
	if (paced) {
		uint64_t inside = 0;
		const char *gap_us = getenv("PACED_GAP_US");
		const long us = gap_us ? atol(gap_us) : 100;
		const struct timespec gap = { us / 1000000, (us % 1000000) * 1000 };
		for (long i = 0; i < n; i++) {
			const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
			sink += bench_work(i, 2);
			inside += now_ns(CLOCK_MONOTONIC) - t0;
			nanosleep(&gap, NULL);
		}
		const uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
		printf("wall_ns_per_call=%.2f cpu_ns_per_call=%.2f calls=%ld\n", (double)inside / n,
		       (double)(c1 - c0) / n, n);
		return 0;
	}
	if (syscalls) {
		/* syscall(), not getppid(): no libc caching can skip the kernel */
		for (long i = 0; i < n; i++)
			sink += syscall(SYS_getppid);
	} else {
		for (long i = 0; i < n; i++)
			sink += bench_work(i, 2);
	}
	const uint64_t w1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	printf("wall_ns_per_call=%.2f cpu_ns_per_call=%.2f calls=%ld\n", (double)(w1 - w0) / n,
	       (double)(c1 - c0) / n, n);
	return 0;
}
