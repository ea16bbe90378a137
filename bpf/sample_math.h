/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sample_math.h: the sampling arithmetic, one copy compiled into the BPF
 * programs and into the agent (its reference decision and unit tests), so the
 * kernel and userspace cannot drift apart. Pure integer functions, no helpers.
 *
 * A probe's acceptance threshold A (64 bits) gives p = A / 2^64; ~0 keeps all.
 * - Random draw (no trace id): keep iff (draw32 << 32) < A.
 * - Trace id (OpenTelemetry consistent probability sampling, tracestate
 *   `ot=th:`): R = the trace id's low 56 bits, T = 2^56 - (A >> 8) the OTel
 *   rejection threshold, keep iff R >= T. An OTel SDK at the same p keeps the
 *   same traces; a lower p keeps a subset.
 */
#ifndef MCP_SAMPLE_MATH_H
#define MCP_SAMPLE_MATH_H

#include "mcp_abi.h"

#ifdef __cplusplus
#define MCP_MATH_INLINE static inline
#else
#define MCP_MATH_INLINE static __always_inline
#endif

#define MCP_RANDOMNESS_BITS 56
#define MCP_RANDOMNESS_MASK ((1ULL << MCP_RANDOMNESS_BITS) - 1)
#define MCP_KEEP_ALL (~0ULL)

/* OTel rejection threshold T of acceptance threshold A: 0 keeps all, 2^56 none. */
MCP_MATH_INLINE __u64 mcp_otel_threshold(__u64 accept)
{
	if (accept == MCP_KEEP_ALL)
		return 0;
	return (1ULL << MCP_RANDOMNESS_BITS) - (accept >> 8);
}

/* Consistent decision on 56 bits of trace-id randomness. */
MCP_MATH_INLINE int mcp_otel_keep(__u64 randomness56, __u64 accept)
{
	return (randomness56 & MCP_RANDOMNESS_MASK) >= mcp_otel_threshold(accept);
}

/* Random-draw decision: one 32-bit draw, exact to 2^-32. */
MCP_MATH_INLINE int mcp_draw_keep(__u32 draw, __u64 accept)
{
	return accept == MCP_KEEP_ALL || ((__u64)draw << 32) < accept;
}

#endif /* MCP_SAMPLE_MATH_H */
