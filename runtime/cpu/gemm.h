/* runtime/cpu/gemm.h — the CPU's matrix products (gemm.c), their own small
 * library (tgc_gemm) so that the CPU kernels and the cuda-emu emulator's
 * cuBLAS share one definition. */
#ifndef TGC_RT_GEMM_H
#define TGC_RT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* gemm.c: C[M,N] (row-major, leading dimension ldc) = op(A) op(B), op(A)
 * [M,K] (A stored [K,M], leading dimension lda, when ta), op(B) [K,N] (B
 * stored [N,K] when tb). Every element is the fused multiply-add chain over
 * k = 0..K-1 in order from +0: the same bits on every machine, thread count
 * and split of the work. Threads the work itself unless called inside a
 * parallel region. 0, or -1 when out of memory (packing buffers). */
int rt_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
             int64_t ldb, float *C, int64_t ldc);
int rt_dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B,
             int64_t ldb, double *C, int64_t ldc);
/* C[M,N] (f32) = op(A) op(B) for bf16 operands (uint16 bit patterns; the
 * layout of rt_sgemm) with vdpbf16ps (AVX512-BF16): every element the f32
 * fma chain of rt_sgemm over the operands widened to f32, except that
 * denormal operands and partial sums are flushed to zero (the instruction's
 * DAZ / FTZ). Off unless asked for (TGC_GEMM_BF16=1 in the environment or
 * rt_gemm_use_bf16(true); see gemm.c for why): -2 when not in use (not asked
 * for, or the machine lacks the instruction): the caller widens and calls
 * rt_sgemm. -1 when out of memory. */
int rt_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                 const uint16_t *B, int64_t ldb, float *C, int64_t ldc);
/* Whether rt_gemm_bf16 runs (not -2). */
bool rt_gemm_bf16_native(void);
/* For tests: turn the vdpbf16ps path on or off (not while a product
 * runs); -1 if this machine lacks the instruction. */
int rt_gemm_use_bf16(bool on);
/* The micro-kernels in use: "avx512", "avx2" or "generic" (plain C). */
const char *rt_gemm_isa(void);
/* For tests: use the named micro-kernels from now on (not while a product
 * runs); -1 if this machine lacks them. */
int rt_gemm_use_isa(const char *isa);

#endif
