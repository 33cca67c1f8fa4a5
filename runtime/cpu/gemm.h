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
 * layout of rt_sgemm), by one of two kernels (gemm.c):
 * - AMX tiles (tdpbf16ps), by default where the CPU has AMX-BF16 and Linux
 *   grants the tiles (TGC_GEMM_AMX=0 in the environment turns it off): bf16
 *   pair products added in f32 in the instruction's order, denormals flushed:
 *   within K 2^-24 sum |a b| of the exact sum, not rt_sgemm's bits; the same
 *   bits for every thread count;
 * - vdpbf16ps (AVX512-BF16), when asked for (TGC_GEMM_BF16=1, which wins
 *   over AMX, or rt_gemm_use_bf16(true)): every element the f32 fma chain of
 *   rt_sgemm over the operands widened to f32, except that denormal operands
 *   and partial sums are flushed to zero (the instruction's DAZ / FTZ).
 * -2 when neither is in use: the caller widens and calls rt_sgemm. -1 when
 * out of memory. */
int rt_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                 const uint16_t *B, int64_t ldb, float *C, int64_t ldc);
/* C[M,N] (bf16 bits, leading dimension ldc) = rt_gemm_bf16's f32 result
 * rounded to bf16 (to nearest even; NaN kept quiet), on AMX tiles with each
 * element's whole sum in a tile (no f32 C written): -2 unless AMX runs and
 * K <= RT_GEMM_BF16_ROUND_MAX_K (the caller then rounds rt_gemm_bf16's). */
#define RT_GEMM_BF16_ROUND_MAX_K 1024
int rt_gemm_bf16_round(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                       const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc);
/* Whether rt_gemm_bf16 runs (not -2). */
bool rt_gemm_bf16_native(void);
/* The kernel rt_gemm_bf16 runs: "amx", "avx512bf16", or NULL (none). */
const char *rt_gemm_bf16_kind(void);
/* For tests: turn the vdpbf16ps path on (AMX off) or both off (not while a
 * product runs); -1 if this machine lacks the instruction. */
int rt_gemm_use_bf16(bool on);
/* For tests: turn the AMX path on (vdpbf16ps off) or off (not while a
 * product runs); -1 (nothing changed) if this machine or process cannot run
 * the tiles. */
int rt_gemm_use_amx(bool on);
/* The micro-kernels in use: "avx512", "avx2" or "generic" (plain C). */
const char *rt_gemm_isa(void);
/* For tests: use the named micro-kernels from now on (not while a product
 * runs); -1 if this machine lacks them. */
int rt_gemm_use_isa(const char *isa);

#endif
