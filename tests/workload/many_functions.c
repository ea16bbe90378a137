/*
 * mcp-many-functions ROUNDS [hold]: 4,096 distinct functions mcp_many_000 .. mcp_many_fff (three hex
 * digits), for probe-count and wildcard tests. Each round calls function i (i % 3) + 1 times,
 * in order, so a probe counting another function's calls shows up in its count. With `hold`
 * it then waits until killed, mapping the file (the kernel checks a uprobe's instruction when
 * it places the breakpoint in a process that maps it, so only then can it refuse one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

/* noinline and -fno-ipa-icf (CMake): 4,096 separate entry points, none merged. */
#define F(n) __attribute__((noinline, used)) void mcp_many_##n(void) { sink += 0x##n; }
#define F16(p) F(p##0) F(p##1) F(p##2) F(p##3) F(p##4) F(p##5) F(p##6) F(p##7) \
	F(p##8) F(p##9) F(p##a) F(p##b) F(p##c) F(p##d) F(p##e) F(p##f)
#define F256(p) F16(p##0) F16(p##1) F16(p##2) F16(p##3) F16(p##4) F16(p##5) F16(p##6) F16(p##7) \
	F16(p##8) F16(p##9) F16(p##a) F16(p##b) F16(p##c) F16(p##d) F16(p##e) F16(p##f)
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(a) X(b) X(c) X(d) X(e) X(f)
ALL(F256)

#define P(n) mcp_many_##n,
#define P16(p) P(p##0) P(p##1) P(p##2) P(p##3) P(p##4) P(p##5) P(p##6) P(p##7) \
	P(p##8) P(p##9) P(p##a) P(p##b) P(p##c) P(p##d) P(p##e) P(p##f)
#define P256(p) P16(p##0) P16(p##1) P16(p##2) P16(p##3) P16(p##4) P16(p##5) P16(p##6) P16(p##7) \
	P16(p##8) P16(p##9) P16(p##a) P16(p##b) P16(p##c) P16(p##d) P16(p##e) P16(p##f)
static void (*const functions[])(void) = {ALL(P256)};

#ifdef __x86_64__
/* Never called: its first instruction is lock-prefixed, which x86 uprobes refuse (ENOTSUPP), as
 * libc's pthread_spin_lock; a wildcard matching it must skip it (mcp_*_00[0-3] does). */
__asm__(".text\n.globl mcp_locked_000\n.type mcp_locked_000, @function\nmcp_locked_000:\n"
	"\tlock incl (%rdi)\n\tret\n.size mcp_locked_000, .-mcp_locked_000\n");
#endif

int main(int argc, char **argv)
{
	const long rounds = argc > 1 ? atol(argv[1]) : 1;
	for (long r = 0; r < rounds; r++)
		for (unsigned i = 0; i < sizeof(functions) / sizeof(functions[0]); i++)
			for (unsigned k = 0; k <= i % 3; k++)
				functions[i]();
	fprintf(stderr, "%zu functions, %ld rounds\n", sizeof(functions) / sizeof(functions[0]), rounds);
	if (argc > 2 && !strcmp(argv[2], "hold"))
		for (;;)
			pause();
	return 0;
}
