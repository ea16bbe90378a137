/*
 * bench/system/cputime: cputime OUTFILE CMD ARGS... runs CMD, waits for it and
 * writes its total CPU time in nanoseconds (user + system, all threads, from
 * wait4's rusage) to OUTFILE. bench/system/overhead wraps each tracer in it:
 * the shell reaps its children itself, so /proc cannot be read after exit, and
 * GNU time prints only 10 ms resolution. SIGINT/SIGTERM are ignored here so the
 * script signals the tracer (this process's only child) directly.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s OUTFILE CMD ARGS...\n", argv[0]);
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
	int status;
	struct rusage ru;
	while (wait4(child, &status, 0, &ru) < 0)
		;
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 1;
	fprintf(f, "%lld\n",
		(long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
			(long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
	fclose(f);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
