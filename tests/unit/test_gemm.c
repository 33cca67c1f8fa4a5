/* tests/unit/test_gemm.c — runtime/cpu/gemm.c against its definition.
 *
 * rt_sgemm / rt_dgemm promise that every element of C = op(A) op(B) is the
 * fused multiply-add chain c = fma(A[i,k], B[k,j], c) over k = 0..K-1 from
 * +0. The reference here is that chain written out with fmaf / fma, so the
 * comparison is exact (0 tolerance: the same bits), for:
 *   - every micro-kernel set this machine has (generic, avx2, avx512);
 *   - all four transpose cases, leading dimensions wider than the matrix;
 *   - sizes that are not multiples of the micro-tile (edges), K across
 *     several KC blocks, N across several NC blocks, M across MC blocks,
 *     C wider than NC with K in one block (up to 3 KC) or in several,
 *     tall (split by rows) and wide (split by columns) products;
 *   - 1, 2 and 3 threads, and a call made inside a parallel region;
 *   - bottom-edge tiles of 4 and 8 rows (the shorter kernels);
 *   - K = 0 (zeros) and M or N = 0 (nothing written).
 * rt_gemm_bf16 (vdpbf16ps, where the machine has it) against the same f32
 * chain over the bf16 operands widened, bit for bit on operands and sums
 * in the normal range (its one documented difference: denormals flush to
 * zero; checked too), odd K (a padded pair) and K across KC blocks; and
 * turned off, it declines (-2) so the caller widens.
 * rt_gemm_bf16 on AMX tiles (tdpbf16ps, where the machine and Linux allow
 * it; "skipped: no AMX" otherwise): its sums are not the chain's, so each
 * element is held to the bound of any f32 summation order of the exact bf16
 * products, |C - exact| <= K 2^-24 sum_k |a_k b_k| (+ K 2^-126 for flushed
 * denormals), exact = the f64 sum (bf16 products are exact in f64), and to
 * the same bits for 1, 2 and 3 threads and inside a parallel region; shapes
 * not multiples of the 32 x 32 tile or of its 32-step K chunk, odd K, K
 * across KC blocks, strides wider than the matrix, the four transpose
 * cases, C wider than NC (split by columns: K blocks of another depth);
 * rt_gemm_bf16_round (the result rounded to bf16 on the way out of the
 * tiles) against the f32 result rounded, and declining (-2) past its K.
 */
#include <omp.h>
#include <stdlib.h>

#include "check.h"
#include "kernels.h"

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* The definition: one fmaf chain per element. */
static void ref_s(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float c = 0.0f;
      for (int64_t k = 0; k < K; k++) c = fmaf(ta ? A[k * lda + i] : A[i * lda + k], tb ? B[j * ldb + k] : B[k * ldb + j], c);
      C[i * ldc + j] = c;
    }
}
static void ref_d(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B,
                  int64_t ldb, double *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double c = 0.0;
      for (int64_t k = 0; k < K; k++) c = fma(ta ? A[k * lda + i] : A[i * lda + k], tb ? B[j * ldb + k] : B[k * ldb + j], c);
      C[i * ldc + j] = c;
    }
}

/* Compares C with the reference bit for bit; prints the first mismatches. */
static int compare(const char *what, const void *got, const void *want, int64_t M, int64_t N, int64_t ldc, size_t es) {
  int bad = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      const char *g = (const char *)got + (size_t)(i * ldc + j) * es, *w = (const char *)want + (size_t)(i * ldc + j) * es;
      if (memcmp(g, w, es) != 0 && bad++ < 3)
        fprintf(stderr, "  %s: C[%lld,%lld] = %.9g, the chain gives %.9g\n", what, (long long)i, (long long)j,
                es == 4 ? *(const float *)g : *(const double *)g, es == 4 ? *(const float *)w : *(const double *)w);
    }
  if (bad) fprintf(stderr, "  %s: %d elements differ (tolerance: 0, the same bits)\n", what, bad);
  return bad;
}

static void run_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, int pad) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  int64_t arows = ta ? K : M, brows = tb ? N : K;
  size_t na = (size_t)(arows * lda + 1), nb = (size_t)(brows * ldb + 1), nc = (size_t)(M * ldc + 1);
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
  double *Ad = malloc(na * 8), *Bd = malloc(nb * 8), *Cd = malloc(nc * 8), *Rd = malloc(nc * 8);
  uint64_t s = (uint64_t)(M * 1000003 + N * 1009 + K * 7 + ta * 2 + tb);
  for (size_t i = 0; i < na; i++) Ad[i] = A[i] = frand(&s);
  for (size_t i = 0; i < nb; i++) Bd[i] = B[i] = frand(&s);
  for (size_t i = 0; i < nc; i++) R[i] = C[i] = Rd[i] = Cd[i] = 12345.0f; /* the padding must survive */
  ref_s(ta, tb, M, N, K, A, lda, B, ldb, R, ldc);
  ref_d(ta, tb, M, N, K, Ad, lda, Bd, ldb, Rd, ldc);
  char what[160];
  snprintf(what, sizeof what, "%s M%lld N%lld K%lld%s%s pad %d", rt_gemm_isa(), (long long)M, (long long)N,
           (long long)K, ta ? " ta" : "", tb ? " tb" : "", pad);
  int threads[] = {1, 2, 3};
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(threads[t]);
    CHECK_EQ_INT(rt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc), 0);
    CHECK_EQ_INT(compare(what, C, R, M, N + pad, ldc, 4), 0);
    CHECK_EQ_INT(rt_dgemm(ta, tb, M, N, K, Ad, lda, Bd, ldb, Cd, ldc), 0);
    CHECK_EQ_INT(compare(what, Cd, Rd, M, N + pad, ldc, 8), 0);
  }
  /* inside a parallel region: each thread its own product, all the same */
  omp_set_num_threads(2);
  float *C2 = malloc(nc * 4);
  for (size_t i = 0; i < nc; i++) C2[i] = 12345.0f;
  int rc = 0;
#pragma omp parallel sections reduction(| : rc)
  {
#pragma omp section
    rc |= rt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
#pragma omp section
    rc |= rt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C2, ldc);
  }
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(compare(what, C, R, M, N + pad, ldc, 4), 0);
  CHECK_EQ_INT(compare(what, C2, R, M, N + pad, ldc, 4), 0);
  free(A), free(B), free(C), free(R), free(C2), free(Ad), free(Bd), free(Cd), free(Rd);
}

static void test_shapes(void) {
  static const int64_t shapes[][3] = {
      {1, 1, 1},   {3, 5, 7},    {13, 33, 17}, {12, 32, 256}, {25, 70, 300},  /* edges; K across 2 KC blocks */
      {200, 9, 40}, {7, 400, 40}, {150, 40, 33},                               /* tall, wide, M across MC */
      {5, 3100, 3}, {64, 64, 64}, {2, 1, 600},                                  /* N across NC; K across 3 blocks */
      {20, 64, 300}, {256, 96, 40},                                            /* bottom edges of 8 and 4 rows */
      {3, 3300, 520}, {2, 3100, 769}, /* wider than NC (one thread): K <= 3 KC in one block (kc_block), K > 3 KC not */
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int t = 0; t < 4; t++) run_case(shapes[i][0], shapes[i][1], shapes[i][2], t & 1, t & 2, i % 3 == 1 ? 3 : 0);
}

static void test_degenerate(void) {
  float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 1, 1, 1, 1, 1}, C[4] = {9, 9, 9, 9};
  CHECK_EQ_INT(rt_sgemm(false, false, 2, 2, 0, A, 1, B, 2, C, 2), 0); /* empty sum */
  for (int i = 0; i < 4; i++) CHECK(C[i] == 0.0f && !signbit(C[i]));
  C[0] = 7;
  CHECK_EQ_INT(rt_sgemm(false, false, 0, 2, 3, A, 3, B, 2, C, 2), 0); /* nothing to write */
  CHECK(C[0] == 7);
  /* -0 products start from +0: (+0) + (-0) = +0, as the chain defines */
  float a = -1.0f, b = 0.0f, c = 5.0f;
  CHECK_EQ_INT(rt_sgemm(false, false, 1, 1, 1, &a, 1, &b, 1, &c, 1), 0);
  CHECK(c == 0.0f && !signbit(c));
}

static uint16_t bf16_of(float x) { /* x is rounded already: its top 16 bits */
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}

static void run_bf16_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, int pad) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  size_t na = (size_t)((ta ? K : M) * lda + 1), nb = (size_t)((tb ? N : K) * ldb + 1), nc = (size_t)(M * ldc + 1);
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
  uint16_t *Ah = malloc(na * 2), *Bh = malloc(nb * 2);
  uint64_t s = (uint64_t)(M * 31 + N * 17 + K * 5 + ta * 2 + tb);
  for (size_t i = 0; i < na; i++) Ah[i] = bf16_of(A[i] = ir_bf16_to_f32(ir_f32_to_bf16(frand(&s))));
  for (size_t i = 0; i < nb; i++) Bh[i] = bf16_of(B[i] = ir_bf16_to_f32(ir_f32_to_bf16(frand(&s))));
  for (size_t i = 0; i < nc; i++) R[i] = C[i] = 12345.0f;
  ref_s(ta, tb, M, N, K, A, lda, B, ldb, R, ldc);
  char what[160];
  snprintf(what, sizeof what, "bf16 M%lld N%lld K%lld%s%s pad %d", (long long)M, (long long)N, (long long)K,
           ta ? " ta" : "", tb ? " tb" : "", pad);
  for (int t = 1; t <= 3; t++) {
    omp_set_num_threads(t);
    CHECK_EQ_INT(rt_gemm_bf16(ta, tb, M, N, K, Ah, lda, Bh, ldb, C, ldc), 0);
    CHECK_EQ_INT(compare(what, C, R, M, N + pad, ldc, 4), 0);
  }
  free(A), free(B), free(C), free(R), free(Ah), free(Bh);
}

static void test_bf16(void) {
  if (rt_gemm_use_bf16(true) != 0) {
    printf("gemm bf16     vdpbf16ps not available on this machine\n");
  } else {
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {13, 33, 17}, {12, 32, 256}, {25, 70, 301},
                                        {200, 9, 40}, {7, 400, 41}, {5, 3100, 3}, {64, 64, 64}, {2, 1, 601}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int t = 0; t < 4; t++) run_bf16_case(shapes[i][0], shapes[i][1], shapes[i][2], t & 1, t & 2, i % 3 == 1 ? 3 : 0);
    /* denormals: an operand of 2^-130 counts as 0, a sum below 2^-126 flushes */
    uint16_t a[2] = {bf16_of(0x1p-130f), bf16_of(1.0f)}, b[2] = {bf16_of(1.0f), bf16_of(0x1p-127f)};
    float c = 1.0f;
    CHECK_EQ_INT(rt_gemm_bf16(false, false, 1, 1, 2, a, 2, b, 1, &c, 1), 0);
    CHECK(c == 0.0f);
    CHECK(rt_gemm_bf16_native());
    printf("gemm bf16     every element the f32 fma chain of the widened operands (4 transpose cases; 1-3 threads)\n");
  }
  CHECK_EQ_INT(rt_gemm_use_bf16(false), 0);
  CHECK(!rt_gemm_bf16_native());
  uint16_t one = bf16_of(1.0f);
  float c = 7.0f;
  CHECK_EQ_INT(rt_gemm_bf16(false, false, 1, 1, 1, &one, 1, &one, 1, &c, 1), -2);
  CHECK(c == 7.0f);
}

/* The f64 sum of the exact products, and the sum of their magnitudes. */
static void ref_exact(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                      int64_t ldb, double *E, double *S) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double e = 0, a = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
        e += p;
        a += fabs(p);
      }
      E[i * N + j] = e;
      S[i * N + j] = a;
    }
}

static void run_amx_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, int pad) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  size_t na = (size_t)((ta ? K : M) * lda + 1), nb = (size_t)((tb ? N : K) * ldb + 1), nc = (size_t)(M * ldc + 1);
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C1 = malloc(nc * 4);
  double *E = malloc((size_t)(M * N + 1) * 8), *S = malloc((size_t)(M * N + 1) * 8);
  uint16_t *Ah = malloc(na * 2), *Bh = malloc(nb * 2);
  uint64_t s = (uint64_t)(M * 7919 + N * 31 + K * 3 + ta * 2 + tb);
  for (size_t i = 0; i < na; i++) Ah[i] = bf16_of(A[i] = ir_bf16_to_f32(ir_f32_to_bf16(frand(&s))));
  for (size_t i = 0; i < nb; i++) Bh[i] = bf16_of(B[i] = ir_bf16_to_f32(ir_f32_to_bf16(frand(&s))));
  ref_exact(ta, tb, M, N, K, A, lda, B, ldb, E, S);
  char what[160];
  snprintf(what, sizeof what, "amx M%lld N%lld K%lld%s%s pad %d", (long long)M, (long long)N, (long long)K,
           ta ? " ta" : "", tb ? " tb" : "", pad);
  for (int t = 1; t <= 3; t++) {
    for (size_t i = 0; i < nc; i++) C[i] = 12345.0f; /* the padding must survive */
    omp_set_num_threads(t);
    CHECK_EQ_INT(rt_gemm_bf16(ta, tb, M, N, K, Ah, lda, Bh, ldb, C, ldc), 0);
    int bad = 0;
    for (int64_t i = 0; i < M; i++) {
      for (int64_t j = 0; j < N; j++) {
        double e = E[i * N + j], tol = (double)K * (0x1p-24 * S[i * N + j] + 0x1p-126), g = C[i * ldc + j];
        if (!(fabs(g - e) <= tol) && bad++ < 3)
          fprintf(stderr, "  %s, %d threads: C[%lld,%lld] = %.9g, exact %.9g (tolerance %.3g)\n", what, t,
                  (long long)i, (long long)j, g, e, tol);
      }
      for (int64_t j = N; j < ldc; j++) bad += C[i * ldc + j] != 12345.0f;
    }
    CHECK_EQ_INT(bad, 0);
    if (t == 1) memcpy(C1, C, nc * 4);
    else CHECK_EQ_INT(memcmp(C, C1, nc * 4), 0); /* the same bits for every thread count */
  }
  /* inside a parallel region: each of 2 threads its own product, the same bits */
  float *C2 = malloc(nc * 4), *outs[2] = {C, C2};
  memcpy(C2, C1, nc * 4);
  int rc = 0;
#pragma omp parallel num_threads(2) reduction(| : rc)
  rc |= rt_gemm_bf16(ta, tb, M, N, K, Ah, lda, Bh, ldb, outs[omp_get_thread_num() & 1], ldc);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(memcmp(C, C1, nc * 4), 0);
  CHECK_EQ_INT(memcmp(C2, C1, nc * 4), 0);
  /* rounded to bf16 in the tiles' way out: the f32 result's bf16 (ir_f32_to_bf16), 1-3 threads */
  uint16_t *H = malloc(nc * 2);
  for (int t = 1; t <= 3; t++) {
    omp_set_num_threads(t);
    for (size_t i = 0; i < nc; i++) H[i] = 0x1234;
    int got = rt_gemm_bf16_round(ta, tb, M, N, K, Ah, lda, Bh, ldb, H, ldc);
    CHECK_EQ_INT(got, K <= RT_GEMM_BF16_ROUND_MAX_K ? 0 : -2);
    int bad = 0;
    for (int64_t i = 0; got == 0 && i < M; i++)
      for (int64_t j = 0; j < ldc; j++)
        bad += H[i * ldc + j] != (j < N ? ir_f32_to_bf16(C1[i * ldc + j]) : 0x1234);
    if (bad) fprintf(stderr, "  %s: %d bf16 results are not the f32 result rounded\n", what, bad);
    CHECK_EQ_INT(bad, 0);
  }
  free(A), free(B), free(C), free(C1), free(C2), free(E), free(S), free(Ah), free(Bh), free(H);
}

static void test_amx(void) {
  if (rt_gemm_use_amx(true) != 0) {
    printf("gemm amx      skipped: no AMX (the CPU lacks AMX-BF16 or Linux does not grant the tiles)\n");
    return;
  }
  CHECK(rt_gemm_bf16_native());
  CHECK(strcmp(rt_gemm_bf16_kind(), "amx") == 0);
  static const int64_t shapes[][3] = {
      {1, 1, 1},    {3, 5, 7},      {13, 33, 17},  {32, 32, 32}, {33, 31, 63}, /* edges of the tile, odd K */
      {64, 64, 64}, {25, 70, 301},  {130, 9, 40},  {7, 400, 41}, {2, 1, 601},  /* K across KC blocks, tall, wide */
      {160, 96, 288}, {5, 3100, 3}, {3, 3300, 520}, {40, 3200, 769}, {9, 40, 1100}, /* M across MC; N across NC; K > 1024 */
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int t = 0; t < 4; t++) run_amx_case(shapes[i][0], shapes[i][1], shapes[i][2], t & 1, t & 2, i % 3 == 1 ? 3 : 0);
  /* denormal operands count as 0 (2^-130 * 1 and 1 * 2^-127 add nothing to 1 * 1) */
  uint16_t a[3] = {bf16_of(0x1p-130f), bf16_of(1.0f), bf16_of(1.0f)}, b[3] = {bf16_of(1.0f), bf16_of(0x1p-127f), bf16_of(1.0f)};
  float c = 7.0f;
  CHECK_EQ_INT(rt_gemm_bf16(false, false, 1, 1, 3, a, 3, b, 1, &c, 1), 0);
  CHECK(c == 1.0f);
  /* a sum below 2^-126 flushes: 2^-70 * 2^-70 = 2^-140 */
  uint16_t tiny = bf16_of(0x1p-70f);
  CHECK_EQ_INT(rt_gemm_bf16(false, false, 1, 1, 1, &tiny, 1, &tiny, 1, &c, 1), 0);
  CHECK(c == 0.0f);
  /* a NaN operand: a quiet NaN out of the rounding */
  uint16_t qn = 0x7fc1, h16 = 0;
  CHECK_EQ_INT(rt_gemm_bf16_round(false, false, 1, 1, 1, &qn, 1, &tiny, 1, &h16, 1), 0);
  CHECK((h16 & 0x7f80) == 0x7f80 && (h16 & 0x40));
  /* off: back to the widened f32 products (-2) */
  CHECK_EQ_INT(rt_gemm_use_amx(false), 0);
  CHECK(!rt_gemm_bf16_native());
  CHECK_EQ_INT(rt_gemm_bf16_round(false, false, 1, 1, 1, &qn, 1, &tiny, 1, &h16, 1), -2);
  printf("gemm amx      every element within K 2^-24 sum |a b| of the exact sum, the same bits for 1-3 threads\n");
}

int main(void) {
  int max = omp_get_max_threads();
  const char *isas[] = {"generic", "avx2", "avx512"};
  for (int i = 0; i < 3; i++) {
    if (rt_gemm_use_isa(isas[i]) != 0) {
      printf("gemm %-8s not available on this machine\n", isas[i]);
      continue;
    }
    test_shapes();
    test_degenerate();
    printf("gemm %-8s every element the fma chain (f32, f64; 4 transpose cases; 1-3 threads; nested)\n", isas[i]);
  }
  CHECK_EQ_INT(rt_gemm_use_isa("sse9"), -1);
  test_bf16();
  test_amx();
  omp_set_num_threads(max);
  return check_done();
}
