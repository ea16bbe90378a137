/*
 * bench/system/cputime: cputime OUTFILE CMD ARGS... runs CMD, waits for it and
 * writes its total CPU time in nanoseconds (user + system, all threads, from
 * wait4's rusage) to OUTFILE. bench/system/overhead wraps each tracer in it:
 * the shell reaps its children itself, so /proc cannot be read after exit, and
 * GNU time prints only 10 ms resolution. SIGINT/SIGTERM are ignored here so the
 * script signals the tracer (this process's only child) directly.
 * cputime --self OUTFILE CMD ARGS... counts CMD alone: wait4's rusage also holds the
 * children CMD reaped (`mcp-agent trace -- WORKLOAD` would count the workload), so
 * --self leaves CMD a zombie (waitid WNOWAIT) and reads its own utime + stime from
 * /proc/PID/stat (clock ticks) before reaping it.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* utime + stime of a process (not its children) in ns, from /proc/PID/stat; -1 if unreadable. */
static long long self_cpu_ns(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	unsigned long long utime, stime;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
		return -1;
	return (long long)(utime + stime) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

int main(int argc, char **argv)
{
	int self = argc > 1 && !strcmp(argv[1], "--self");
	argv += self;
	argc -= self;
	if (argc < 3) {
		fprintf(stderr, "usage: %s [--self] OUTFILE CMD ARGS...\n", argv[0] - self);
		return 2;
	}
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	long long ns = -1;
	if (self) {
		siginfo_t si;
		while (waitid(P_PID, child, &si, WEXITED | WNOWAIT) < 0)
			;
		ns = self_cpu_ns(child);
	}
	int status;
	struct rusage ru;
	while (wait4(child, &status, 0, &ru) < 0)
		;
	if (!self)
		ns = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
		     (long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
	FILE *f = fopen(argv[1], "w");
	if (!f || ns < 0)
		return 1;
	fprintf(f, "%lld\n", ns);
	fclose(f);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
