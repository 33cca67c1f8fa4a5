/* runtime/cpu/gemm.c — the CPU backend's matrix products: C = op(A) op(B),
 * row-major, f32 and f64, with one definition of the result:
 *
 *   C[i,j] = the fused multiply-add chain c = fma(A[i,k], B[k,j], c) over
 *            k = 0, 1, ..., K-1 in order, starting from c = +0, in the
 *            element type.
 *
 * Every element is that chain, whatever the machine (AVX-512, AVX2 or plain
 * C, which uses fmaf/fma), the thread count, the blocking, the transposes or
 * how a batched product is split: so tgc's results do not depend on any of
 * them, bit for bit. (OpenBLAS, used before, computes an element with
 * schemes that depend on the element's place in its micro-tiles on some
 * CPUs — Haswell and Zen kernels in 0.3.21 —, so results changed with the
 * thread count and with how rows were grouped into calls.)
 *
 * How (the BLIS scheme): C is computed in MR x NR micro-tiles held in vector
 * registers. B is packed in KC x NC panels of NR-wide column strips, A in
 * MC x KC blocks of MR-tall row strips (zero-padded at the edges: padding
 * only feeds lanes that are not stored). The K loop is cut into KC-deep
 * blocks; a micro-tile continues its chains from C in memory (an f32 stored
 * and reloaded exactly), so the blocking does not change the chain. Threads
 * share the packing and split the micro-tiles of a block between them.
 * Packing buffers are kept per thread across calls (no allocation in the
 * steady state) and freed at exit. On AVX-512, f32 operands are packed by
 * vector copies (contiguous strips) and 16 x 16 register transposes
 * (strided ones), and bottom-edge tiles of up to 4 or 8 rows run 4- and
 * 8-row kernels: the same values and chains.
 *
 * rt_gemm_bf16 (bf16 operands, f32 C) is the same scheme on AMX tiles
 * (tdpbf16ps: by default where the machine has them; not the chain's bits,
 * within a stated bound, the same bits for every thread count) or with
 * vdpbf16ps (AVX512-BF16, when asked for: the chain's bits), K packed in
 * pairs: see the sections below.
 */
#define _GNU_SOURCE /* syscall (the tile permission) */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define RT_GEMM_X86 1
#endif

#ifndef KC_
#define KC_ 256
#define MC_ 144
#define NC_ 3072
#endif
enum { KC = KC_, MC = MC_, NC = NC_, MAX_MR = 12, MAX_NR = 32 };

/* One micro-kernel: c[MR x NR] (ldc) continues (or, when first, starts) its
 * chains over kc steps of the packed a (MR per step) and b (NR per step). */
typedef void (*ukernel_s)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool first);
typedef void (*ukernel_d)(int64_t kc, const double *a, const double *b, double *c, int64_t ldc, bool first);

/* ---------------------------------------------------------------------- */
/* micro-kernels                                                            */
/* ---------------------------------------------------------------------- */

/* Plain C: the reference chain with fmaf / fma (exact on every machine). */
#define GENERIC_MR 4
#define GENERIC_NR 4
static void ukr_s_generic(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool first) {
  float acc[GENERIC_MR][GENERIC_NR];
  for (int r = 0; r < GENERIC_MR; r++)
    for (int j = 0; j < GENERIC_NR; j++) acc[r][j] = first ? 0.0f : c[r * ldc + j];
  for (int64_t k = 0; k < kc; k++)
    for (int r = 0; r < GENERIC_MR; r++)
      for (int j = 0; j < GENERIC_NR; j++) acc[r][j] = fmaf(a[k * GENERIC_MR + r], b[k * GENERIC_NR + j], acc[r][j]);
  for (int r = 0; r < GENERIC_MR; r++)
    for (int j = 0; j < GENERIC_NR; j++) c[r * ldc + j] = acc[r][j];
}
static void ukr_d_generic(int64_t kc, const double *a, const double *b, double *c, int64_t ldc, bool first) {
  double acc[GENERIC_MR][GENERIC_NR];
  for (int r = 0; r < GENERIC_MR; r++)
    for (int j = 0; j < GENERIC_NR; j++) acc[r][j] = first ? 0.0 : c[r * ldc + j];
  for (int64_t k = 0; k < kc; k++)
    for (int r = 0; r < GENERIC_MR; r++)
      for (int j = 0; j < GENERIC_NR; j++) acc[r][j] = fma(a[k * GENERIC_MR + r], b[k * GENERIC_NR + j], acc[r][j]);
  for (int r = 0; r < GENERIC_MR; r++)
    for (int j = 0; j < GENERIC_NR; j++) c[r * ldc + j] = acc[r][j];
}

#ifdef RT_GEMM_X86
/* A vector micro-kernel: MR rows x NV vectors of W lanes; every accumulator
 * lane is one element's chain (vfmadd: one rounding, as fma). The packed A
 * holds AS values per step (AS > MR: the first MR rows of a taller strip). */
#define UKERNEL(name, isa, T, V, W, MR, AS, NV, zero, load, store, set1, fmadd)                         \
  __attribute__((target(isa))) static void name(int64_t kc, const T *a, const T *b, T *c, int64_t ldc,  \
                                                  bool first) {                                           \
    V acc[MR][NV];                                                                                        \
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                                 \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = first ? zero() : load(c + r * ldc + v * W); \
    for (int64_t k = 0; k < kc; k++) {                                                                    \
      V bv[NV];                                                                                           \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] = load(b + k * (NV * W) + v * W);        \
      _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                                             \
        V ar = set1(a[k * AS + r]);                                                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = fmadd(ar, bv[v], acc[r][v]);     \
      }                                                                                                   \
    }                                                                                                     \
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                                 \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) store(c + r * ldc + v * W, acc[r][v]);           \
  }
UKERNEL(ukr_s_avx512, "avx512f", float, __m512, 16, 12, 12, 2, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
        _mm512_set1_ps, _mm512_fmadd_ps)
UKERNEL(ukr_s_avx2, "avx2,fma", float, __m256, 8, 6, 6, 2, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm256_set1_ps, _mm256_fmadd_ps)
UKERNEL(ukr_d_avx512, "avx512f", double, __m512d, 8, 12, 12, 2, _mm512_setzero_pd, _mm512_loadu_pd, _mm512_storeu_pd,
        _mm512_set1_pd, _mm512_fmadd_pd)
UKERNEL(ukr_d_avx2, "avx2,fma", double, __m256d, 4, 6, 6, 2, _mm256_setzero_pd, _mm256_loadu_pd, _mm256_storeu_pd,
        _mm256_set1_pd, _mm256_fmadd_pd)
/* The bottom edge of the f32 AVX-512 tiles: the first 4 or 8 rows of a
 * 12-row strip, for M % 12 (gpt2's 256 rows: 4), instead of 12 rows of
 * which most are padding. */
UKERNEL(ukr_s_avx512_4, "avx512f", float, __m512, 16, 4, 12, 2, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
        _mm512_set1_ps, _mm512_fmadd_ps)
UKERNEL(ukr_s_avx512_8, "avx512f", float, __m512, 16, 8, 12, 2, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
        _mm512_set1_ps, _mm512_fmadd_ps)

/* r[j] := column j of the 16 x 16 matrix whose row i is r[i]. */
__attribute__((target("avx512f"))) static inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]); /* per 128-bit lane: a0 b0 a1 b1 */
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { /* r[i + j], lane q: column 4q + j of rows i..i+3 */
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int h = 0; h < 16; h += 8)
    for (int j = 0; j < 4; j++) {
      t[h + j] = _mm512_shuffle_f32x4(r[h + j], r[h + j + 4], 0x88);
      t[h + j + 4] = _mm512_shuffle_f32x4(r[h + j], r[h + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

/* PACK's strided case (the strip's lines are rows of X: A untransposed, B
 * transposed) for f32, 16 lines x 16 steps at a time through registers
 * instead of one scattered store per element: the same values in the same
 * places. */
__attribute__((target("avx512f"))) static void pack_across_s_avx512(float *d, int64_t width, int64_t w, int64_t kc,
                                                                    const float *X, int64_t ld, int64_t k0,
                                                                    int64_t l0) {
  for (int64_t g = 0; g < width; g += 16) {
    int64_t lanes = width - g < 16 ? width - g : 16;
    __mmask16 sm = (__mmask16)((1u << lanes) - 1);
    for (int64_t k = 0; k < kc; k += 16) {
      int64_t kr = kc - k < 16 ? kc - k : 16;
      __mmask16 lm = (__mmask16)((1u << kr) - 1);
      __m512 r[16];
      for (int64_t i = 0; i < 16; i++)
        r[i] = i < lanes && g + i < w ? _mm512_maskz_loadu_ps(lm, X + (l0 + g + i) * ld + k0 + k) : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t j = 0; j < kr; j++) _mm512_mask_storeu_ps(d + (k + j) * width + g, sm, r[j]);
    }
  }
}

/* PACK's contiguous case (B untransposed, A transposed) for f32: two
 * (masked) vector copies per step instead of a memcpy call. */
__attribute__((target("avx512f"))) static void pack_along_s_avx512(float *d, int64_t width, int64_t w, int64_t kc,
                                                                   const float *X, int64_t ld, int64_t k0,
                                                                   int64_t l0) {
  for (int64_t g = 0; g < width; g += 16) {
    int64_t lanes = width - g < 16 ? width - g : 16, have = w - g < 0 ? 0 : w - g < lanes ? w - g : lanes;
    __mmask16 sm = (__mmask16)((1u << lanes) - 1), lm = (__mmask16)((1u << have) - 1);
    const float *src = X + k0 * ld + l0 + g;
    for (int64_t k = 0; k < kc; k++) _mm512_mask_storeu_ps(d + k * width + g, sm, _mm512_maskz_loadu_ps(lm, src + k * ld));
  }
}
#endif

/* The micro-kernels this machine runs, chosen once. */
typedef struct {
  int mr, nr;
  ukernel_s s;
  int dmr, dnr;
  ukernel_d d;
  const char *isa;
  bool pack_avx512; /* PACK's f32 cases through pack_across_s_avx512 / pack_along_s_avx512 */
  ukernel_s s4, s8; /* the f32 kernel's first 4 / 8 rows (bottom edge tiles), or NULL */
} gemm_arch;

/* The best micro-kernels the machine has, or those named `want` (NULL:
 * the best); false when the machine lacks them. */
static bool pick_arch(const char *want, gemm_arch *g) {
  *g = (gemm_arch){GENERIC_MR, GENERIC_NR, ukr_s_generic, GENERIC_MR, GENERIC_NR, ukr_d_generic, "generic", false, NULL, NULL};
  bool avx512 = false, avx2 = false;
#ifdef RT_GEMM_X86
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f");
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (want && strcmp(want, "avx512") == 0) {
    if (!avx512) return false;
  } else if (want && strcmp(want, "avx2") == 0) {
    if (!avx2) return false;
    avx512 = false;
  } else if (want) {
    if (strcmp(want, "generic") != 0) return false;
    avx512 = avx2 = false;
  }
  if (avx512) *g = (gemm_arch){12, 32, ukr_s_avx512, 12, 16, ukr_d_avx512, "avx512", true, ukr_s_avx512_4, ukr_s_avx512_8};
  else if (avx2) *g = (gemm_arch){6, 16, ukr_s_avx2, 6, 8, ukr_d_avx2, "avx2", false, NULL, NULL};
#else
  if (want && strcmp(want, "generic") != 0) return false;
#endif
  return true;
}

static gemm_arch arch;
static bool arch_ready;
static void ensure_arch(void) {
  if (__atomic_load_n(&arch_ready, __ATOMIC_ACQUIRE)) return;
#pragma omp critical(rt_gemm_arch)
  if (!arch_ready) {
    pick_arch(NULL, &arch);
    __atomic_store_n(&arch_ready, true, __ATOMIC_RELEASE);
  }
}

const char *rt_gemm_isa(void) {
  ensure_arch();
  return arch.isa;
}

int rt_gemm_use_isa(const char *isa) {
  gemm_arch g;
  if (!pick_arch(isa, &g)) return -1;
  ensure_arch();
  arch = g;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* packing scratch: one A block and one B panel per thread slot            */
/* ---------------------------------------------------------------------- */
enum { MAX_SLOTS = 256 };
static void *scratch[MAX_SLOTS];
static size_t scratch_cap[MAX_SLOTS];
static bool scratch_atexit;

static void free_scratch(void) {
  for (int i = 0; i < MAX_SLOTS; i++) {
    free(scratch[i]);
    scratch[i] = NULL;
    scratch_cap[i] = 0;
  }
}

/* Slot `slot`'s buffer of at least `bytes` (64-aligned), NULL if out of memory. */
static void *scratch_get(int slot, size_t bytes) {
  if (slot < 0 || slot >= MAX_SLOTS) return NULL;
  if (scratch_cap[slot] >= bytes) return scratch[slot];
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes) != 0) return NULL;
  free(scratch[slot]);
  scratch[slot] = p;
  scratch_cap[slot] = bytes;
#pragma omp critical(rt_gemm_atexit)
  if (!scratch_atexit) {
    scratch_atexit = true;
    atexit(free_scratch);
  }
  return p;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---------------------------------------------------------------------- */
/* the blocked product, written once for both element types                */
/* ---------------------------------------------------------------------- */
/* Packs a strip of w (<= width) lines of an operand into dst: kc steps of
 * `width` values, zero-padded past w. Step k, line l reads X[(k0 + k) * ld
 * + l0 + l] when `along` (the strip's lines are contiguous in memory: B
 * untransposed, A transposed), else X[(l0 + l) * ld + k0 + k]. */
#define PACK(T, dst, width, w, kc, X, ld, along, k0, l0)                                    \
  do {                                                                                      \
    T *d_ = (dst);                                                                          \
    if (along) {                                                                            \
      for (int64_t k = 0; k < (kc); k++) {                                                  \
        const T *src_ = (X) + ((k0) + k) * (ld) + (l0);                                     \
        memcpy(d_ + k * (width), src_, (size_t)(w) * sizeof(T));                            \
        for (int64_t l = (w); l < (width); l++) d_[k * (width) + l] = (T)0;                 \
      }                                                                                     \
    } else {                                                                                \
      for (int64_t l = 0; l < (width); l++) {                                               \
        if (l >= (w)) {                                                                     \
          for (int64_t k = 0; k < (kc); k++) d_[k * (width) + l] = (T)0;                    \
          continue;                                                                         \
        }                                                                                   \
        const T *src_ = (X) + ((l0) + l) * (ld) + (k0);                                     \
        for (int64_t k = 0; k < (kc); k++) d_[k * (width) + l] = src_[k];                   \
      }                                                                                     \
    }                                                                                       \
  } while (0)

#ifdef RT_GEMM_X86
#define PACK_S(T, dst, width, w, kc, X, ld, along, k0, l0)                          \
  do {                                                                              \
    if (arch.pack_avx512 && !(along))                                               \
      pack_across_s_avx512((dst), (width), (w), (kc), (X), (ld), (k0), (l0));       \
    else if (arch.pack_avx512)                                                      \
      pack_along_s_avx512((dst), (width), (w), (kc), (X), (ld), (k0), (l0));        \
    else                                                                            \
      PACK(T, dst, width, w, kc, X, ld, along, k0, l0);                             \
  } while (0)
#else
#define PACK_S PACK
#endif

/* The depth of a K block. KC, except when C is wider than one NC block of
 * columns and K at most 3 KC (the LM head's logits: N = V, K = D): then all
 * of K, so that each element of C is written once instead of stored and
 * reloaded per K block from beyond the caches (C's NC-wide block of every
 * row does not stay cached from one K block to the next). The chains are
 * the same: a K block continues them from C exactly. */
static int64_t kc_block(int64_t N, int64_t K) { return N > NC && K <= 3 * KC ? K : KC; }

#define GEMM_BODY(T, MR_, NR_, UK, PK, EDGE)                                                                           \
  const int mr = MR_, nr = NR_;                                                                             \
  int64_t nc_max = min64(NC, (N + nr - 1) / nr * nr);                                                       \
  int64_t kcb = kc_block(N, K), kc_max = min64(kcb, K);                                                    \
  T *bp = buf, *ap = bp + kc_max * nc_max;                                                                  \
  for (int64_t jc = 0; jc < N; jc += NC) {                                                                  \
    int64_t nc = min64(NC, N - jc), npanels = (nc + nr - 1) / nr;                                           \
    for (int64_t pc = 0; pc < K; pc += kcb) {                                                               \
      int64_t kc = min64(kcb, K - pc);                                                                      \
      bool first = pc == 0;                                                                                 \
      for (int64_t q = 0; q < npanels; q++) {                                                              \
        PK(T, bp + q * kc * nr, nr, min64(nr, N - (jc + q * nr)), kc, B, ldb, !tb, pc, jc + q * nr);        \
      }                                                                                                     \
      for (int64_t ic = 0; ic < M; ic += MC) {                                                              \
        int64_t mc = min64(MC, M - ic), mpanels = (mc + mr - 1) / mr;                                       \
        for (int64_t p = 0; p < mpanels; p++) {                                                            \
          PK(T, ap + p * kc * mr, mr, min64(mr, M - (ic + p * mr)), kc, A, lda, ta, pc, ic + p * mr);       \
        }                                                                                                   \
        for (int64_t q = 0; q < npanels; q++) {                                                             \
          for (int64_t p = 0; p < mpanels; p++) {                                                           \
            int64_t i0 = ic + p * mr, j0 = jc + q * nr, h = min64(mr, M - i0), w = min64(nr, N - j0);       \
            T *cij = C + i0 * ldc + j0;                                                                     \
            if (h == mr && w == nr) {                                                                       \
              UK(kc, ap + p * kc * mr, bp + q * kc * nr, cij, ldc, first);                                  \
            } else if (w == nr && EDGE(h) != UK && h == (h <= 4 ? 4 : 8)) { /* the kernel's own height */    \
              EDGE(h)(kc, ap + p * kc * mr, bp + q * kc * nr, cij, ldc, first);                             \
            } else { /* an edge tile: through a full-size copy */                                           \
              T tile[MAX_MR * MAX_NR];                                                                      \
              for (int64_t r = 0; r < h && !first; r++) memcpy(tile + r * nr, cij + r * ldc, (size_t)w * sizeof(T)); \
              EDGE(h)(kc, ap + p * kc * mr, bp + q * kc * nr, tile, nr, first);                             \
              for (int64_t r = 0; r < h; r++) memcpy(cij + r * ldc, tile + r * nr, (size_t)w * sizeof(T)); \
            }                                                                                               \
          }                                                                                                 \
        }                                                                                                   \
      }                                                                                                     \
    }                                                                                                       \
  }

/* The kernel for a bottom-edge tile of h rows: a shorter one where there is one. */
#define EDGE_S(h) ((h) <= 4 && arch.s4 ? arch.s4 : (h) <= 8 && arch.s8 ? arch.s8 : arch.s)
#define EDGE_D(h) (arch.d)

static size_t scratch_elems(int64_t M, int64_t N, int64_t K, int mr, int nr) {
  int64_t nc = min64(NC, (N + nr - 1) / nr * nr), mc = min64(MC, (M + mr - 1) / mr * mr), kc = min64(kc_block(N, K), K);
  return (size_t)(kc * nc + kc * mc);
}

/* One thread's product (its own packing buffer). */
static void sgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc, float *buf) {
  GEMM_BODY(float, arch.mr, arch.nr, arch.s, PACK_S, EDGE_S)
}
static void dgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                         const double *B, int64_t ldb, double *C, int64_t ldc, double *buf) {
  GEMM_BODY(double, arch.dmr, arch.dnr, arch.d, PACK, EDGE_D)
}

/* Work below which a product runs on one thread (thread start-up costs more). */
#define PAR_MIN_FLOPS (1 << 20)

/* The threads split C into one block of whole micro-tile columns each (or
 * of rows, when C is taller than wide) and each computes its block alone,
 * packing its own panels: no barrier, no shared buffer. (The packing of the
 * operand every block reads in full is repeated per thread: M*K or K*N
 * copies against M*N*K/threads multiply-adds.) */
#define GEMM_ENTRY(TI, T, TB, fn, serial, MR, NR, SIZE)                                                         \
  int fn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TI *A, int64_t lda, const TI *B, int64_t ldb, \
         T *C, int64_t ldc) {                                                                             \
    ensure_arch();                                                                                        \
    if (M <= 0 || N <= 0) return 0;                                                                       \
    if (K <= 0) {                                                                                         \
      for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof *C);                       \
      return 0;                                                                                           \
    }                                                                                                     \
    bool nested = omp_in_parallel();                                                                      \
    int outer = nested ? omp_get_thread_num() : 0;                                                        \
    int nt = nested || (double)M * (double)N * (double)K < PAR_MIN_FLOPS ? 1 : omp_get_max_threads();       \
    bool by_rows = M > N;                                                                                 \
    int64_t unit = by_rows ? MR : NR, units = ((by_rows ? M : N) + unit - 1) / unit;                      \
    if (nt > units) nt = (int)units;                                                                      \
    if (nt > MAX_SLOTS) nt = MAX_SLOTS;                                                                   \
    int failed = 0;                                                                                       \
    _Pragma("omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)") {                          \
      int t = omp_get_thread_num(), slot = nested ? outer : t;                                            \
      int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;                                             \
      int64_t b0 = u0 * unit, b1 = u1 * unit, lim = by_rows ? M : N;                                      \
      if (b1 > lim) b1 = lim;                                                                             \
      if (b1 > b0) {                                                                                      \
        int64_t m = by_rows ? b1 - b0 : M, n = by_rows ? N : b1 - b0;                                     \
        const TI *a = by_rows ? A + (ta ? b0 : b0 * lda) : A;                                             \
        const TI *b = by_rows ? B : B + (tb ? b0 * ldb : b0);                                             \
        T *c = C + (by_rows ? b0 * ldc : b0);                                                             \
        TB *buf = scratch_get(slot, SIZE(m, n, K, MR, NR) * sizeof(TB));                                  \
        if (buf) serial(ta, tb, m, n, K, a, lda, b, ldb, c, ldc, buf);                                    \
        else failed = 1;                                                                                  \
      }                                                                                                   \
    }                                                                                                     \
    return failed ? -1 : 0;                                                                               \
  }

GEMM_ENTRY(float, float, float, rt_sgemm, sgemm_serial, arch.mr, arch.nr, scratch_elems)
GEMM_ENTRY(double, double, double, rt_dgemm, dgemm_serial, arch.dmr, arch.dnr, scratch_elems)

/* ---------------------------------------------------------------------- */
/* bf16 operands, f32 products: vdpbf16ps (AVX512-BF16)                    */
/* ---------------------------------------------------------------------- */
/* vdpbf16ps c, a, b adds, per f32 lane i, the exact product of the odd
 * bf16 pair elements a[2i+1] b[2i+1] to c (rounded: one fma), then that of
 * the even ones a[2i] b[2i], with denormal inputs and results flushed to
 * zero. The packing puts step k in the odd (high) half of a 32-bit pair and
 * k + 1 in the even (low) half, so one instruction is two links of the chain
 * in order: the f32 chain over the widened operands, twice as many products
 * per instruction. An odd K pads the last pair with zeros (adding +0 * +0 to
 * a chain that never holds -0 leaves it as it is). */
enum { BF_MR = 12, BF_NR = 32 };

/* The pair of steps k (high half) and k + 1 (low half; 0 past kc) of line l. */
#define BF_PAIR(hi, lo) ((uint32_t)(lo) | (uint32_t)(hi) << 16)

/* d[p * width + l], p < ceil(kc / 2): the pairs of steps 2p, 2p + 1 of
 * lines l < w (zero past w) of X; `along` as in PACK. */
static void pack_bf16(uint32_t *d, int64_t width, int64_t w, int64_t kc, const uint16_t *X, int64_t ld, bool along,
                      int64_t k0, int64_t l0) {
  int64_t np = (kc + 1) / 2;
  if (along) {
    for (int64_t p = 0; p < np; p++) {
      const uint16_t *r0 = X + (k0 + 2 * p) * ld + l0;
      uint32_t *o = d + p * width;
      if (2 * p + 1 < kc)
        for (int64_t l = 0; l < w; l++) o[l] = BF_PAIR(r0[l], r0[ld + l]);
      else
        for (int64_t l = 0; l < w; l++) o[l] = BF_PAIR(r0[l], 0);
      for (int64_t l = w; l < width; l++) o[l] = 0;
    }
    return;
  }
  for (int64_t l = 0; l < width; l++) {
    if (l >= w) {
      for (int64_t p = 0; p < np; p++) d[p * width + l] = 0;
      continue;
    }
    const uint16_t *src = X + (l0 + l) * ld + k0;
    for (int64_t p = 0; p < kc / 2; p++) d[p * width + l] = BF_PAIR(src[2 * p], src[2 * p + 1]);
    if (kc & 1) d[(np - 1) * width + l] = BF_PAIR(src[kc - 1], 0);
  }
}

typedef void (*ukernel_bf16)(int64_t np, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, bool first);

#ifdef RT_GEMM_X86
__attribute__((target("avx512f,avx512bf16"))) static void ukr_bf16_avx512(int64_t np, const uint32_t *a,
                                                                           const uint32_t *b, float *c, int64_t ldc,
                                                                           bool first) {
  __m512 acc[BF_MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < BF_MR; r++)
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + v * 16);
  for (int64_t p = 0; p < np; p++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * BF_NR), b1 = (__m512bh)_mm512_loadu_si512(b + p * BF_NR + 16);
#pragma GCC unroll 16
    for (int r = 0; r < BF_MR; r++) {
      __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[p * BF_MR + r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < BF_MR; r++)
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) _mm512_storeu_ps(c + r * ldc + v * 16, acc[r][v]);
}
#endif

/* ---------------------------------------------------------------------- */
/* bf16 operands, f32 products: AMX tiles (tdpbf16ps)                      */
/* ---------------------------------------------------------------------- */
/* tdpbf16ps c, a, b: for every element of the 16 x 16 f32 tile c, the 16
 * pairs of bf16 products along the row of a (16 rows x 32 bf16) and the
 * column of b (16 rows x 16 pairs: the "VNNI" layout, step 2p in the low
 * half of a 32-bit pair, 2p + 1 in the high half) added to it in f32, round
 * to nearest even, with denormal operands and results flushed to zero
 * (whatever MXCSR says). The instruction's own order of the 32 additions is
 * not the f32 chain's, so the results are not rt_sgemm's bits: they are
 * within the bound of any f32 summation order, |C - exact| <= K u sum |a_k
 * b_k| (u = 2^-24), plus the flushed denormals (test_gemm). They are the
 * same bits for every thread count and split of the work: every element is
 * the same sequence of instructions over the same 32-step chunks of K (K
 * blocks are multiples of 32, edges padded with zeros: + 0 * 0 leaves a sum
 * that starts at +0 as it is) continued from C exactly.
 *
 * A micro-tile is 32 x 32 f32 in tiles 0-3, its A strip in tiles 4-5 (rows
 * 0-15, 16-31) and its B strip in tiles 6-7 (columns 0-15, 16-31): 4
 * tdpbf16ps (16 x 16 x 32 products each) per 32 steps of K. A is packed as
 * [K/32][32 rows][32 steps] bf16, B as [K/2 pairs][32 columns] pairs (the
 * vdpbf16ps packing with the halves the other way round), both zero-padded
 * to whole 32-step chunks; the blocking is the f32 path's (MC a multiple of
 * 32). Linux hands out the tile registers only to a process that asks
 * (arch_prctl ARCH_REQ_XCOMP_PERM), done once; each thread loads the tile
 * configuration when it starts a product and releases it at the end. */
enum { AMX_MR = 32, AMX_NR = 32, AMX_KS = 32, AMX_MC = 128 };

/* The tile configuration (palette 1): 8 tiles of 16 rows x 64 bytes. */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;

#ifdef RT_GEMM_X86
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* d: A's rows l0 .. l0 + w - 1 (w <= 32; zero past w) over steps k0 .. k0 +
 * kc - 1, as [chunk][32 rows][32 steps] (zero past kc); `ta`: A stored
 * [K, M]. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void pack_amx_a(uint16_t *d, int64_t w, int64_t kc,
                                                                   const uint16_t *A, int64_t lda, bool ta,
                                                                   int64_t k0, int64_t l0) {
  int64_t nk = (kc + AMX_KS - 1) / AMX_KS;
  if (!ta) {
    for (int64_t ch = 0; ch < nk; ch++) {
      int64_t n = kc - ch * AMX_KS < AMX_KS ? kc - ch * AMX_KS : AMX_KS;
      __mmask32 m = (__mmask32)(n == 32 ? ~0u : (1u << n) - 1);
      uint16_t *o = d + ch * AMX_MR * AMX_KS;
      for (int64_t r = 0; r < AMX_MR; r++) {
        __m512i v = r < w ? _mm512_maskz_loadu_epi16(m, A + (l0 + r) * lda + k0 + ch * AMX_KS) : _mm512_setzero_si512();
        _mm512_storeu_si512(o + r * AMX_KS, v);
      }
    }
    return;
  }
  /* A stored [K, M]: steps 2p and 2p + 1 of 16 rows made into 16 pairs
   * (one vector per p), 16 of those transposed: each row's 16 pairs, 64
   * bytes of its chunk */
  for (int64_t ch = 0; ch < nk; ch++)
    for (int64_t g = 0; g < AMX_MR; g += 16) {
      int64_t lanes = w - g < 0 ? 0 : w - g < 16 ? w - g : 16;
      __mmask16 m = (__mmask16)((1u << lanes) - 1);
      __m512 r[16];
      for (int64_t i = 0; i < 16; i++) {
        int64_t k = ch * AMX_KS + 2 * i;
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        if (k < kc) lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, A + (k0 + k) * lda + l0 + g));
        if (k + 1 < kc) hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, A + (k0 + k + 1) * lda + l0 + g));
        r[i] = _mm512_castsi512_ps(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
      transpose16(r);
      uint16_t *o = d + ch * AMX_MR * AMX_KS + g * AMX_KS;
      for (int64_t j = 0; j < 16; j++) _mm512_storeu_ps(o + j * AMX_KS, r[j]);
    }
}

/* d: B's columns l0 .. l0 + w - 1 (w <= 32; zero past w) over steps k0 ..
 * k0 + kc - 1 as [pair][32 columns] pairs (steps 2p low, 2p + 1 high; zero
 * past kc, to a whole 32-step chunk); `tb`: B stored [N, K]. */
__attribute__((target("avx512f,avx512bw"))) static void pack_amx_b(uint32_t *d, int64_t w, int64_t kc,
                                                                   const uint16_t *B, int64_t ldb, bool tb,
                                                                   int64_t k0, int64_t l0) {
  int64_t np = (kc + 1) / 2, npad = round_up(kc, AMX_KS) / 2;
  if (!tb) { /* rows k and k + 1 interleaved: one permute per 16 pairs */
    __mmask32 m = (__mmask32)(w == 32 ? ~0u : (1u << w) - 1);
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                        37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,
                                        22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (int64_t p = 0; p < np; p++) {
      const uint16_t *r0 = B + (k0 + 2 * p) * ldb + l0;
      __m512i x = _mm512_maskz_loadu_epi16(m, r0);
      __m512i y = 2 * p + 1 < kc ? _mm512_maskz_loadu_epi16(m, r0 + ldb) : _mm512_setzero_si512();
      _mm512_storeu_si512(d + p * AMX_NR, _mm512_permutex2var_epi16(x, lo, y));
      _mm512_storeu_si512(d + p * AMX_NR + 16, _mm512_permutex2var_epi16(x, hi, y));
    }
  } else { /* a pair is 32 bits of a row of B: the strided f32 packing's transposes, when they are aligned to pairs */
    if (ldb % 2 == 0 && k0 % 2 == 0 && kc / 2 > 0)
      pack_across_s_avx512((float *)d, AMX_NR, w, kc / 2, (const float *)(const void *)B, ldb / 2, k0 / 2, l0);
    else
      for (int64_t l = 0; l < AMX_NR; l++)
        for (int64_t p = 0; p < kc / 2; p++) {
          const uint16_t *src = B + (l0 + l) * ldb + k0 + 2 * p;
          d[p * AMX_NR + l] = l < w ? (uint32_t)src[0] | (uint32_t)src[1] << 16 : 0;
        }
    if (kc & 1)
      for (int64_t l = 0; l < AMX_NR; l++) d[(np - 1) * AMX_NR + l] = l < w ? B[(l0 + l) * ldb + k0 + kc - 1] : 0;
  }
  memset(d + np * AMX_NR, 0, (size_t)((npad - np) * AMX_NR) * sizeof *d);
}

/* c[32 x 32] (ldc) continues (or, when first, starts) its sums over nk
 * 32-step chunks of the packed a and b. */
__attribute__((target("amx-tile,amx-bf16"))) static void ukr_amx(int64_t nk, const uint16_t *a, const uint32_t *b,
                                                                float *c, int64_t ldc, bool first) {
  int64_t cs = ldc * (int64_t)sizeof(float);
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, cs);
    _tile_loadd(1, c + 16, cs);
    _tile_loadd(2, c + 16 * ldc, cs);
    _tile_loadd(3, c + 16 * ldc + 16, cs);
  }
  for (int64_t ch = 0; ch < nk; ch++) {
    const uint16_t *ac = a + ch * AMX_MR * AMX_KS;
    const uint32_t *bc = b + ch * (AMX_KS / 2) * AMX_NR;
    _tile_loadd(4, ac, AMX_KS * 2);
    _tile_loadd(5, ac + 16 * AMX_KS, AMX_KS * 2);
    _tile_loadd(6, bc, AMX_NR * 4);
    _tile_loadd(7, bc + 16, AMX_NR * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, cs);
  _tile_stored(1, c + 16, cs);
  _tile_stored(2, c + 16 * ldc, cs);
  _tile_stored(3, c + 16 * ldc + 16, cs);
}

/* (In memory before the instruction reads it: gcc 12's _tile_loadconfig
 * tells the compiler it reads 8 bytes, so a configuration built on the
 * stack can lose its other stores.) */
static const amx_config amx_cfg = {.palette = 1,
                                   .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                   .rows = {16, 16, 16, 16, 16, 16, 16, 16}};
__attribute__((target("amx-tile"))) static void amx_begin(void) { _tile_loadconfig(&amx_cfg); }
__attribute__((target("amx-tile"))) static void amx_end(void) { _tile_release(); }

/* Whether this machine and process may run the tiles: the CPU has
 * AMX-TILE and AMX-BF16 (cpuid 7.0 EDX bits 24, 22; palette 1 with 8 tiles
 * of 16 x 64 bytes, cpuid 0x1D), AVX512-BW for the packing, and Linux grants
 * the tile data state. */
static bool amx_probe(void) {
#ifdef __linux__
  unsigned a, b, c, d;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 22 & 1)) return false;
  if (__get_cpuid_max(0, NULL) < 0x1d || !__get_cpuid_count(0x1d, 1, &a, &b, &c, &d)) return false;
  if ((b & 0xffff) < 64 || (b >> 16) < 8 || (c & 0xffff) < 16) return false;
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
  return false;
#endif
}
#endif

/* amx_probe's answer, asked once per process (under rt_gemm_bf16's lock). */
static int amx_known = -1;
static bool amx_available(void) {
  if (amx_known < 0) {
#ifdef RT_GEMM_X86
    amx_known = amx_probe();
#else
    amx_known = 0;
#endif
  }
  return amx_known == 1;
}

/* ---------------------------------------------------------------------- */
/* which bf16 products run                                                 */
/* ---------------------------------------------------------------------- */
/* rt_gemm_bf16 runs AMX where the machine and the kernel allow it, unless
 * TGC_GEMM_AMX=0; the vdpbf16ps kernel when asked for (TGC_GEMM_BF16=1 in
 * the environment, or rt_gemm_use_bf16(true)), which takes precedence;
 * else nothing (-2: the caller widens the operands for rt_sgemm). Not
 * vdpbf16ps by default: on the Sapphire Rapids cores measured (issue 22)
 * one vdpbf16ps a cycle does no more products than two f32 vfmadd, and its
 * pair packing made the gpt2-124m bf16 step 1.12x slower than widening the
 * operands for rt_sgemm (bench/README.md). TGC_GEMM_VERBOSE=1 prints the
 * choice to stderr once. */
static ukernel_bf16 bf16_kernel;
static bool amx_on;
static int bf16_state; /* 0: not decided yet; 1: decided */

static ukernel_bf16 bf16_detect(void) {
#ifdef RT_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) return ukr_bf16_avx512;
#endif
  return NULL;
}

static void ensure_bf16(void) {
  if (__atomic_load_n(&bf16_state, __ATOMIC_ACQUIRE)) return;
#pragma omp critical(rt_gemm_bf16)
  if (!bf16_state) {
    const char *e = getenv("TGC_GEMM_BF16"), *x = getenv("TGC_GEMM_AMX"), *v = getenv("TGC_GEMM_VERBOSE");
    bool vdp = e && strcmp(e, "1") == 0;
    bf16_kernel = vdp ? bf16_detect() : NULL;
    amx_on = !vdp && !(x && strcmp(x, "0") == 0) && amx_available();
    if (v && strcmp(v, "0") != 0 && v[0])
      fprintf(stderr, "tgc gemm: f32 products on %s, bf16 products on %s\n", rt_gemm_isa(),
              amx_on ? "amx" : bf16_kernel ? "avx512bf16" : "f32 (operands widened)");
    __atomic_store_n(&bf16_state, 1, __ATOMIC_RELEASE);
  }
}

bool rt_gemm_bf16_native(void) {
  ensure_bf16();
  return amx_on || bf16_kernel != NULL;
}

const char *rt_gemm_bf16_kind(void) {
  ensure_bf16();
  return amx_on ? "amx" : bf16_kernel ? "avx512bf16" : NULL;
}

int rt_gemm_use_bf16(bool on) {
  ensure_bf16();
  ukernel_bf16 k = on ? bf16_detect() : NULL;
  if (on && !k) return -1;
  bf16_kernel = k;
  amx_on = false;
  return 0;
}

int rt_gemm_use_amx(bool on) {
  ensure_bf16();
  bool ok = false;
#pragma omp critical(rt_gemm_bf16)
  ok = amx_available();
  if (on && !ok) return -1;
  amx_on = on;
  bf16_kernel = NULL;
  return 0;
}

static void bgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                         const uint16_t *B, int64_t ldb, float *C, int64_t ldc, uint32_t *buf) {
  const int mr = BF_MR, nr = BF_NR;
  int64_t nc_max = min64(NC, (N + nr - 1) / nr * nr), kp_max = (min64(KC, K) + 1) / 2;
  uint32_t *bp = buf, *ap = bp + kp_max * nc_max;
  for (int64_t jc = 0; jc < N; jc += NC) {
    int64_t nc = min64(NC, N - jc), npanels = (nc + nr - 1) / nr;
    for (int64_t pc = 0; pc < K; pc += KC) { /* KC is even: a block starts a pair */
      int64_t kc = min64(KC, K - pc), np = (kc + 1) / 2;
      bool first = pc == 0;
      for (int64_t q = 0; q < npanels; q++)
        pack_bf16(bp + q * np * nr, nr, min64(nr, N - (jc + q * nr)), kc, B, ldb, !tb, pc, jc + q * nr);
      for (int64_t ic = 0; ic < M; ic += MC) {
        int64_t mc = min64(MC, M - ic), mpanels = (mc + mr - 1) / mr;
        for (int64_t p = 0; p < mpanels; p++)
          pack_bf16(ap + p * np * mr, mr, min64(mr, M - (ic + p * mr)), kc, A, lda, ta, pc, ic + p * mr);
        for (int64_t q = 0; q < npanels; q++)
          for (int64_t p = 0; p < mpanels; p++) {
            int64_t i0 = ic + p * mr, j0 = jc + q * nr, h = min64(mr, M - i0), w = min64(nr, N - j0);
            float *cij = C + i0 * ldc + j0;
            if (h == mr && w == nr) {
              bf16_kernel(np, ap + p * np * mr, bp + q * np * nr, cij, ldc, first);
            } else { /* an edge tile: through a full-size copy */
              float tile[BF_MR * BF_NR];
              for (int64_t r = 0; r < h && !first; r++) memcpy(tile + r * nr, cij + r * ldc, (size_t)w * sizeof(float));
              bf16_kernel(np, ap + p * np * mr, bp + q * np * nr, tile, nr, first);
              for (int64_t r = 0; r < h; r++) memcpy(cij + r * ldc, tile + r * nr, (size_t)w * sizeof(float));
            }
          }
      }
    }
  }
}

static int bgemm_run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                     const uint16_t *B, int64_t ldb, float *C, int64_t ldc);
GEMM_ENTRY(uint16_t, float, uint32_t, bgemm_run, bgemm_serial, BF_MR, BF_NR, scratch_elems)

#ifdef RT_GEMM_X86
/* The depth of a K block on the tiles: kc_block's, or all of K when C is
 * bf16 (C16: each element rounded once from its whole sum, held in a tile). */
static int64_t amx_kc_block(int64_t N, int64_t K, bool c16) { return c16 ? K : kc_block(N, K); }

static size_t amx_scratch(int64_t M, int64_t N, int64_t K, bool c16) {
  int64_t nc = min64(NC, round_up(N, AMX_NR)), mc = min64(AMX_MC, round_up(M, AMX_MR));
  int64_t kc = round_up(min64(amx_kc_block(N, K, c16), K), AMX_KS);
  return (size_t)(kc * nc + kc * mc);
}
static size_t amx_scratch_elems(int64_t M, int64_t N, int64_t K, int mr, int nr) { return amx_scratch(M, N, K, false); }
static size_t amx16_scratch_elems(int64_t M, int64_t N, int64_t K, int mr, int nr) { return amx_scratch(M, N, K, true); }

/* One thread's product on the tiles (its own packing buffer, in uint16):
 * into the f32 C, or (C16) rounded to bf16 into C16 as rt_bf16_bits rounds. */
static void amx_body(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                     const uint16_t *B, int64_t ldb, float *C, uint16_t *C16, int64_t ldc, uint16_t *buf) {
  const int64_t mr = AMX_MR, nr = AMX_NR;
  bool c16 = C16 != NULL;
  int64_t nc_max = min64(NC, round_up(N, nr)), kcb = amx_kc_block(N, K, c16); /* multiples of 32 or all of K */
  int64_t kcp_max = round_up(min64(kcb, K), AMX_KS);
  uint32_t *bp = (uint32_t *)(void *)buf;
  uint16_t *ap = buf + kcp_max * nc_max;
  amx_begin();
  for (int64_t jc = 0; jc < N; jc += NC) {
    int64_t nc = min64(NC, N - jc), npanels = (nc + nr - 1) / nr;
    for (int64_t pc = 0; pc < K; pc += kcb) {
      int64_t kc = min64(kcb, K - pc), kcp = round_up(kc, AMX_KS), nk = kcp / AMX_KS;
      bool first = pc == 0;
      for (int64_t q = 0; q < npanels; q++)
        pack_amx_b(bp + q * (kcp / 2) * nr, min64(nr, N - (jc + q * nr)), kc, B, ldb, tb, pc, jc + q * nr);
      for (int64_t ic = 0; ic < M; ic += AMX_MC) {
        int64_t mc = min64(AMX_MC, M - ic), mpanels = (mc + mr - 1) / mr;
        for (int64_t p = 0; p < mpanels; p++)
          pack_amx_a(ap + p * kcp * mr, min64(mr, M - (ic + p * mr)), kc, A, lda, ta, pc, ic + p * mr);
        for (int64_t q = 0; q < npanels; q++)
          for (int64_t p = 0; p < mpanels; p++) {
            int64_t i0 = ic + p * mr, j0 = jc + q * nr, h = min64(mr, M - i0), w = min64(nr, N - j0);
            const uint16_t *a = ap + p * kcp * mr;
            const uint32_t *b = bp + q * (kcp / 2) * nr;
            float tile[AMX_MR * AMX_NR];
            if (c16) { /* the whole sum in the tile (first: one K block), rounded on the way out */
              ukr_amx(nk, a, b, tile, nr, true);
              for (int64_t r = 0; r < h; r++)
                for (int64_t j = 0; j < w; j++) {
                  uint32_t u;
                  memcpy(&u, &tile[r * nr + j], sizeof u);
                  C16[(i0 + r) * ldc + j0 + j] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)(u >> 16 | 0x40u) /* quiet NaN */
                                                  : (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16); /* nearest even */
                }
              continue;
            }
            float *cij = C + i0 * ldc + j0;
            if (h == mr && w == nr) {
              ukr_amx(nk, a, b, cij, ldc, first);
            } else { /* an edge tile: through a full-size copy */
              for (int64_t r = 0; r < h && !first; r++) memcpy(tile + r * nr, cij + r * ldc, (size_t)w * sizeof(float));
              ukr_amx(nk, a, b, tile, nr, first);
              for (int64_t r = 0; r < h; r++) memcpy(cij + r * ldc, tile + r * nr, (size_t)w * sizeof(float));
            }
          }
      }
    }
  }
  amx_end();
}
static void amx_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                       const uint16_t *B, int64_t ldb, float *C, int64_t ldc, uint16_t *buf) {
  amx_body(ta, tb, M, N, K, A, lda, B, ldb, C, NULL, ldc, buf);
}
static void amx16_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                         const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc, uint16_t *buf) {
  amx_body(ta, tb, M, N, K, A, lda, B, ldb, NULL, C, ldc, buf);
}

static int amx_run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                   const uint16_t *B, int64_t ldb, float *C, int64_t ldc);
GEMM_ENTRY(uint16_t, float, uint16_t, amx_run, amx_serial, AMX_MR, AMX_NR, amx_scratch_elems)
static int amx16_run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                     const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc);
GEMM_ENTRY(uint16_t, uint16_t, uint16_t, amx16_run, amx16_serial, AMX_MR, AMX_NR, amx16_scratch_elems)
#endif

int rt_gemm_bf16_round(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                       const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc) {
  ensure_bf16();
#ifdef RT_GEMM_X86
  if (amx_on && K <= RT_GEMM_BF16_ROUND_MAX_K) return amx16_run(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
#endif
  return -2;
}

int rt_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                 const uint16_t *B, int64_t ldb, float *C, int64_t ldc) {
  ensure_bf16();
#ifdef RT_GEMM_X86
  if (amx_on) return amx_run(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
#endif
  if (!bf16_kernel) return -2;
  return bgemm_run(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}
