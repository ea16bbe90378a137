// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The CUDA launch programs of cuda.bpf.c without bpf_find_vma, for kernels before 5.17
 * (before 5.13 the verifier refuses a callback's address anywhere in a program). The agent
 * loads this build or the other (loader/kernel_features.h: find_vma), never both.
 */
#define MCP_NO_FIND_VMA
#define MCP_CUDA_NAME(name) name##_nofv
#include "cuda.bpf.c"
