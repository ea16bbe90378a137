/*
 * mcp-many-usdt ROUNDS: USDT at scale (issue 51). Each round passes 2,048 sites of one probe,
 * mcp:site, each with its own index as a constant argument (so each site has its own spec),
 * then 1,280 distinct probes mcp:p_000 .. mcp:p_4ff once each.
 */
#include <stdlib.h>
#include <sys/sdt.h>

#define S(n) DTRACE_PROBE1(mcp, site, n);
#define S16(p) S(p##0) S(p##1) S(p##2) S(p##3) S(p##4) S(p##5) S(p##6) S(p##7) \
	S(p##8) S(p##9) S(p##a) S(p##b) S(p##c) S(p##d) S(p##e) S(p##f)
#define S256(p) S16(p##0) S16(p##1) S16(p##2) S16(p##3) S16(p##4) S16(p##5) S16(p##6) S16(p##7) \
	S16(p##8) S16(p##9) S16(p##a) S16(p##b) S16(p##c) S16(p##d) S16(p##e) S16(p##f)

#define D(n) DTRACE_PROBE(mcp, p_##n);
#define D16(p) D(p##0) D(p##1) D(p##2) D(p##3) D(p##4) D(p##5) D(p##6) D(p##7) \
	D(p##8) D(p##9) D(p##a) D(p##b) D(p##c) D(p##d) D(p##e) D(p##f)
#define D256(p) D16(p##0) D16(p##1) D16(p##2) D16(p##3) D16(p##4) D16(p##5) D16(p##6) D16(p##7) \
	D16(p##8) D16(p##9) D16(p##a) D16(p##b) D16(p##c) D16(p##d) D16(p##e) D16(p##f)

static void sites(void)
{
	S256(0x0) S256(0x1) S256(0x2) S256(0x3) S256(0x4) S256(0x5) S256(0x6) S256(0x7)
}

static void distinct(void)
{
	D256(0) D256(1) D256(2) D256(3) D256(4)
}

int main(int argc, char **argv)
{
	const long rounds = argc > 1 ? atol(argv[1]) : 1;

	for (long r = 0; r < rounds; r++) {
		sites();
		distinct();
	}
	return 0;
}
