/* tests/unit/test_cuda_blas.c — cuBLASLt in cuda-emu against a plain
 * reference of cuBLAS's definition (column-major, op() by the transpose
 * flags, leading dimensions, strided batches):
 *   D[i + j ldd] = epi(alpha sum_k opA(i,k) opB(k,j) + beta C[i + j ldc])
 *   opA(i,k) = transa ? A[k + i lda] : A[i + k lda]   (opB alike)
 * computed in double with three nested loops, no BLAS.
 *
 *   every transpose combination, with leading dimensions equal to and
 *   larger than the rows; strided batches with gaps; every epilogue tgc
 *   uses (BIAS, GELU, GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA,
 *   BGRADB, RELU, RELU_BIAS); bf16 operands with f32 and bf16 outputs; f64;
 *   a swapped transpose flag and a wrong leading dimension give a wrong
 *   answer; shapes, attribute sizes and missing pointers are refused with
 *   their exact messages; reading past an allocation becomes the sticky
 *   CUDA_ERROR_ILLEGAL_ADDRESS a GPU would raise; an operand aligned less
 *   than the heuristic was told (256 bytes by default) is refused, one
 *   chosen for its alignment runs.
 * Tolerances: f32 outputs 1e-5 relative (fp32 sums in another order); bf16
 * outputs 2^-8 relative (one rounding to bf16). */
#include <math.h>

#include "check.h"
#include "ir.h"
#include "testcuda.h"

#define EXPECT_BLAS_FAIL(want, fn, ...)                                                 \
  do {                                                                                  \
    CHECK(CG_CUBLAS(&T_api, NULL, T_err, sizeof T_err, fn, __VA_ARGS__) == -1);         \
    CHECK_STR(T_err, want);                                                             \
  } while (0)
#define TBLAS(fn, ...)                                                                  \
  do {                                                                                  \
    int t_rc_ = CG_CUBLAS(&T_api, NULL, T_err, sizeof T_err, fn, __VA_ARGS__);          \
    if (t_rc_) fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, T_err);               \
    CHECK(t_rc_ == 0);                                                                  \
  } while (0)

static cg_cublaslt_handle handle;

typedef struct {
  int m, n, k, transa, transb, batch;
  int pad;                  /* leading dimension = rows + pad */
  int gap;                  /* batch stride = matrix size + gap */
  unsigned int ab_type, cd_type;
  unsigned int epilogue;
  float alpha, beta;
  bool swap_trans;          /* run with transa flipped: must be wrong */
  int ld_error;             /* run with lda decreased by this: must be wrong */
} gemm_case;

static size_t esize(unsigned int t) { return t == CG_CUDA_R_64F ? 8 : t == CG_CUDA_R_32F ? 4 : 2; }

static void put(void *p, unsigned int t, size_t i, double v) {
  if (t == CG_CUDA_R_32F) ((float *)p)[i] = (float)v;
  else if (t == CG_CUDA_R_64F) ((double *)p)[i] = v;
  else ((uint16_t *)p)[i] = ir_f32_to_bf16((float)v);
}

static double get(const void *p, unsigned int t, size_t i) {
  if (t == CG_CUDA_R_32F) return ((const float *)p)[i];
  if (t == CG_CUDA_R_64F) return ((const double *)p)[i];
  return ir_bf16_to_f32(((const uint16_t *)p)[i]);
}

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) {
  double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

static bool has(unsigned int e, unsigned int what) { return e == what; }

/* Runs one case; returns the number of mismatches (printing the first). */
static int run_case(const gemm_case *g, const char *name) {
  int m = g->m, n = g->n, k = g->k, B = g->batch;
  int ar = g->transa ? k : m, ac = g->transa ? m : k, br = g->transb ? n : k, bc = g->transb ? k : n;
  int lda = ar + g->pad, ldb = br + g->pad, ldc = m + g->pad, ldd = m + g->pad, aux_ld = m + 3;
  long long sa = (long long)lda * ac + g->gap, sb = (long long)ldb * bc + g->gap, sc = (long long)ldc * n + g->gap;
  long long sd = sc, sbias = (g->epilogue == CG_CUBLASLT_EPILOGUE_BGRADB ? n : m) + 2, saux = (long long)aux_ld * n + 4;
  bool f64 = g->ab_type == CG_CUDA_R_64F;
  size_t na = (size_t)(sa * B), nb = (size_t)(sb * B), nc = (size_t)(sc * B), nbias = (size_t)(sbias * B),
         naux = (size_t)(saux * B);
  unsigned int bias_type = g->cd_type, aux_type = g->cd_type;
  void *A = calloc(na, esize(g->ab_type)), *Bm = calloc(nb, esize(g->ab_type)), *C = calloc(nc, esize(g->cd_type)),
       *D = calloc(nc, esize(g->cd_type)), *bias = calloc(nbias, esize(bias_type)),
       *aux = calloc(naux, esize(aux_type));
  for (size_t i = 0; i < na; i++) put(A, g->ab_type, i, sin(0.3 * (double)i) * 2);
  for (size_t i = 0; i < nb; i++) put(Bm, g->ab_type, i, cos(0.17 * (double)i + 0.5));
  for (size_t i = 0; i < nc; i++) put(C, g->cd_type, i, 0.25 * (double)(i % 9) - 1);
  for (size_t i = 0; i < nbias; i++) put(bias, bias_type, i, 0.1 * (double)(i % 11) - 0.5);
  for (size_t i = 0; i < naux; i++) put(aux, aux_type, i, 0.3 * (double)(i % 17) - 2.4);
  cg_cu_deviceptr dA = t_upload(A, na * esize(g->ab_type)), dB = t_upload(Bm, nb * esize(g->ab_type)),
                  dC = t_upload(C, nc * esize(g->cd_type)), dD = t_upload(NULL, nc * esize(g->cd_type)),
                  dbias = t_upload(bias, nbias * esize(bias_type)), daux = t_upload(aux, naux * esize(aux_type));

  cg_cublaslt_matmul_desc desc;
  TBLAS(cublasLtMatmulDescCreate, &desc, f64 ? CG_CUBLAS_COMPUTE_64F : CG_CUBLAS_COMPUTE_32F,
        f64 ? CG_CUDA_R_64F : CG_CUDA_R_32F);
  int32_t ta = g->swap_trans ? !g->transa : g->transa, tb = g->transb;
  uint32_t epi = g->epilogue;
  int64_t aux_ld64 = aux_ld, bias_stride = sbias, aux_stride = saux;
  void *bias_ptr = (void *)(uintptr_t)dbias, *aux_ptr = (void *)(uintptr_t)daux;
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
        sizeof bias_stride);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof aux_ptr);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld64, sizeof aux_ld64);
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
        sizeof aux_stride);
  cg_cublaslt_matrix_layout la, lb, lc, ld;
  int run_lda = lda - g->ld_error;
  /* a flipped transpose reads A as the other shape: same storage, swapped dims */
  uint64_t a_rows = g->swap_trans ? (uint64_t)ac : (uint64_t)ar, a_cols = g->swap_trans ? (uint64_t)ar : (uint64_t)ac;
  TBLAS(cublasLtMatrixLayoutCreate, &la, g->ab_type, a_rows, a_cols, g->swap_trans ? (int64_t)ac + g->pad : run_lda);
  TBLAS(cublasLtMatrixLayoutCreate, &lb, g->ab_type, (uint64_t)br, (uint64_t)bc, ldb);
  TBLAS(cublasLtMatrixLayoutCreate, &lc, g->cd_type, (uint64_t)m, (uint64_t)n, ldc);
  TBLAS(cublasLtMatrixLayoutCreate, &ld, g->cd_type, (uint64_t)m, (uint64_t)n, ldd);
  cg_cublaslt_matrix_layout ls[4] = {la, lb, lc, ld};
  long long strides[4] = {sa, sb, sc, sd};
  int32_t batch = B;
  for (int i = 0; i < 4; i++) {
    int64_t s = strides[i];
    TBLAS(cublasLtMatrixLayoutSetAttribute, ls[i], CG_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    TBLAS(cublasLtMatrixLayoutSetAttribute, ls[i], CG_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
  }
  cg_cublaslt_preference pref;
  TBLAS(cublasLtMatmulPreferenceCreate, &pref);
  uint64_t ws = 1 << 20;
  TBLAS(cublasLtMatmulPreferenceSetAttribute, pref, CG_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cg_cublaslt_heuristic heur;
  int found = 0;
  TBLAS(cublasLtMatmulAlgoGetHeuristic, handle, desc, la, lb, lc, ld, pref, 1, &heur, &found);
  CHECK_EQ_INT(found, 1);
  double alpha64 = g->alpha, beta64 = g->beta;
  const void *alpha = f64 ? (const void *)&alpha64 : (const void *)&g->alpha;
  const void *beta = f64 ? (const void *)&beta64 : (const void *)&g->beta;
  TBLAS(cublasLtMatmul, handle, desc, alpha, (void *)(uintptr_t)dA, la, (void *)(uintptr_t)dB, lb, beta,
        (void *)(uintptr_t)dC, lc, (void *)(uintptr_t)dD, ld, &heur.algo, NULL, 0, NULL);
  TCU(cuCtxSynchronize);
  void *bias_out = malloc(nbias * esize(bias_type)), *aux_out = malloc(naux * esize(aux_type));
  t_download(D, dD, nc * esize(g->cd_type));
  t_download(bias_out, dbias, nbias * esize(bias_type));
  t_download(aux_out, daux, naux * esize(aux_type));

  /* the reference */
  double tol = g->cd_type == CG_CUDA_R_16BF ? 1.0 / 256 : 1e-5;
  int bad = 0;
  unsigned int e = g->epilogue;
  for (int b = 0; b < B; b++) {
    double *col_sum = calloc((size_t)m, sizeof *col_sum);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double s = 0;
        for (int kk = 0; kk < k; kk++) {
          double x = get(A, g->ab_type, (size_t)(b * sa + (g->transa ? kk + (long long)i * lda : i + (long long)kk * lda)));
          double y = get(Bm, g->ab_type, (size_t)(b * sb + (g->transb ? j + (long long)kk * ldb : kk + (long long)j * ldb)));
          s += x * y;
        }
        double v = g->alpha * s + (g->beta != 0 ? g->beta * get(C, g->cd_type, (size_t)(b * sc + i + (long long)j * ldc)) : 0);
        size_t ai = (size_t)(b * saux + i + (long long)j * aux_ld);
        if (has(e, CG_CUBLASLT_EPILOGUE_BIAS) || has(e, CG_CUBLASLT_EPILOGUE_GELU_BIAS) ||
            has(e, CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS) || has(e, CG_CUBLASLT_EPILOGUE_RELU_BIAS))
          v += get(bias, bias_type, (size_t)(b * sbias + i));
        if (has(e, CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS)) {
          double got = get(aux_out, aux_type, ai);
          if (!(fabs(got - v) <= tol * (fabs(v) > 1 ? fabs(v) : 1)) && bad++ < 5)
            fprintf(stderr, "  %s: aux[%d](%d,%d) = %g, want %g\n", name, b, i, j, got, v);
        }
        if (e == CG_CUBLASLT_EPILOGUE_GELU || e == CG_CUBLASLT_EPILOGUE_GELU_BIAS ||
            e == CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
          v = gelu(v);
        if (e == CG_CUBLASLT_EPILOGUE_RELU || e == CG_CUBLASLT_EPILOGUE_RELU_BIAS) v = v > 0 ? v : 0;
        if (e == CG_CUBLASLT_EPILOGUE_DGELU || e == CG_CUBLASLT_EPILOGUE_DGELU_BGRAD)
          v *= gelu_grad(get(aux, aux_type, ai));
        col_sum[i] += v;
        double got = get(D, g->cd_type, (size_t)(b * sd + i + (long long)j * ldd));
        if (!(fabs(got - v) <= tol * (fabs(v) > 1 ? fabs(v) : 1)) && bad++ < 5)
          fprintf(stderr, "  %s: D[%d](%d,%d) = %.9g, want %.9g\n", name, b, i, j, got, v);
      }
    /* bias gradients */
    int len = e == CG_CUBLASLT_EPILOGUE_BGRADB ? n : m;
    for (int i = 0; e == CG_CUBLASLT_EPILOGUE_BGRADA || e == CG_CUBLASLT_EPILOGUE_BGRADB ||
                    e == CG_CUBLASLT_EPILOGUE_DGELU_BGRAD ? i < len : 0; i++) {
      double want = 0;
      if (e == CG_CUBLASLT_EPILOGUE_DGELU_BGRAD) want = col_sum[i];
      for (int kk = 0; kk < k && e != CG_CUBLASLT_EPILOGUE_DGELU_BGRAD; kk++)
        want += e == CG_CUBLASLT_EPILOGUE_BGRADA
                    ? get(A, g->ab_type, (size_t)(b * sa + (g->transa ? kk + (long long)i * lda : i + (long long)kk * lda)))
                    : get(Bm, g->ab_type, (size_t)(b * sb + (g->transb ? i + (long long)kk * ldb : kk + (long long)i * ldb)));
      double got = get(bias_out, bias_type, (size_t)(b * sbias + i));
      if (!(fabs(got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1)) && bad++ < 5)
        fprintf(stderr, "  %s: bias grad[%d][%d] = %.9g, want %.9g\n", name, b, i, got, want);
    }
    free(col_sum);
  }
  TBLAS(cublasLtMatmulPreferenceDestroy, pref);
  for (int i = 0; i < 4; i++) TBLAS(cublasLtMatrixLayoutDestroy, ls[i]);
  TBLAS(cublasLtMatmulDescDestroy, desc);
  cg_cu_deviceptr bufs[] = {dA, dB, dC, dD, dbias, daux};
  for (int i = 0; i < 6; i++) TCU(cuMemFree, bufs[i]);
  free(A), free(Bm), free(C), free(D), free(bias), free(aux), free(bias_out), free(aux_out);
  return bad;
}

static gemm_case base(int ta, int tb) {
  gemm_case g = {.m = 13, .n = 9, .k = 17, .transa = ta, .transb = tb, .batch = 1, .ab_type = CG_CUDA_R_32F,
                 .cd_type = CG_CUDA_R_32F, .epilogue = CG_CUBLASLT_EPILOGUE_DEFAULT, .alpha = 1.5f, .beta = 0.5f};
  return g;
}

static void test_transposes_and_layouts(void) {
  char name[64];
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int pad = 0; pad < 8; pad += 5) {
        gemm_case g = base(ta, tb);
        g.pad = pad;
        snprintf(name, sizeof name, "%c%c pad %d", ta ? 'T' : 'N', tb ? 'T' : 'N', pad);
        CHECK_EQ_INT(run_case(&g, name), 0);
      }
  gemm_case g = base(1, 0);
  g.batch = 3, g.gap = 11, g.pad = 2;
  CHECK_EQ_INT(run_case(&g, "batched TN"), 0);
  g = base(0, 1);
  g.beta = 0;
  CHECK_EQ_INT(run_case(&g, "beta 0"), 0);
  g.ab_type = g.cd_type = CG_CUDA_R_64F;
  g.batch = 2, g.gap = 3;
  CHECK_EQ_INT(run_case(&g, "f64"), 0);
  /* bf16 operands: f32 out, bf16 out */
  g = base(1, 1);
  g.ab_type = CG_CUDA_R_16BF;
  CHECK_EQ_INT(run_case(&g, "bf16 -> f32"), 0);
  g.cd_type = CG_CUDA_R_16BF;
  g.batch = 2, g.gap = 8;
  CHECK_EQ_INT(run_case(&g, "bf16 -> bf16"), 0);
}

static void test_epilogues(void) {
  const unsigned int epilogues[] = {CG_CUBLASLT_EPILOGUE_BIAS,          CG_CUBLASLT_EPILOGUE_GELU,
                                    CG_CUBLASLT_EPILOGUE_GELU_BIAS,     CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                    CG_CUBLASLT_EPILOGUE_DGELU,         CG_CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                    CG_CUBLASLT_EPILOGUE_BGRADA,        CG_CUBLASLT_EPILOGUE_BGRADB,
                                    CG_CUBLASLT_EPILOGUE_RELU,          CG_CUBLASLT_EPILOGUE_RELU_BIAS};
  char name[64];
  for (size_t i = 0; i < sizeof epilogues / sizeof epilogues[0]; i++)
    for (int trans = 0; trans < 2; trans++) {
      gemm_case g = base(trans, !trans);
      g.epilogue = epilogues[i];
      g.batch = 2, g.gap = 5, g.pad = 1;
      if (g.epilogue == CG_CUBLASLT_EPILOGUE_BGRADA || g.epilogue == CG_CUBLASLT_EPILOGUE_BGRADB) g.beta = 0;
      snprintf(name, sizeof name, "epilogue %u, trans %d", epilogues[i], trans);
      CHECK_EQ_INT(run_case(&g, name), 0);
    }
  gemm_case g = base(0, 1);
  g.ab_type = CG_CUDA_R_16BF, g.cd_type = CG_CUDA_R_16BF, g.epilogue = CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  CHECK_EQ_INT(run_case(&g, "bf16 gelu aux bias"), 0);
}

/* The emulator is not forgiving: a flipped flag or a wrong leading
 * dimension gives a wrong answer, as on a GPU. */
static void test_wrong_calls_are_wrong(void) {
  gemm_case g = base(0, 0);
  g.m = g.k = 12; /* square A: the flipped call is valid, just wrong */
  g.swap_trans = true;
  fprintf(stderr, "(the mismatches below are expected)\n");
  CHECK(run_case(&g, "transposed A passed as N") > 0);
  g = base(1, 0);
  g.pad = 3, g.ld_error = 2;
  CHECK(run_case(&g, "lda too small by 2") > 0);
  fprintf(stderr, "(end of expected mismatches)\n");
}

static void test_errors(void) {
  cg_cublaslt_matmul_desc desc;
  TBLAS(cublasLtMatmulDescCreate, &desc, CG_CUBLAS_COMPUTE_32F, CG_CUDA_R_32F);
  int64_t wrong = 1;
  EXPECT_BLAS_FAIL("cublasLtMatmulDescSetAttribute: CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as "
                   "an argument): attribute 3 takes 4 bytes, not 8",
                   cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_TRANSA, &wrong, sizeof wrong);
  EXPECT_BLAS_FAIL("cublasLtMatmulDescSetAttribute: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not "
                   "supported): matmul descriptor attribute 15 is not emulated",
                   cublasLtMatmulDescSetAttribute, desc, 15, &wrong, 4);
  cg_cublaslt_matrix_layout a, b, c, small_ld;
  TBLAS(cublasLtMatrixLayoutCreate, &a, CG_CUDA_R_32F, 4, 5, 4);
  TBLAS(cublasLtMatrixLayoutCreate, &b, CG_CUDA_R_32F, 6, 3, 6);
  TBLAS(cublasLtMatrixLayoutCreate, &c, CG_CUDA_R_32F, 4, 3, 4);
  TBLAS(cublasLtMatrixLayoutCreate, &small_ld, CG_CUDA_R_32F, 5, 3, 4);
  cg_cublaslt_preference pref;
  TBLAS(cublasLtMatmulPreferenceCreate, &pref);
  cg_cublaslt_heuristic h;
  int found = -1;
  EXPECT_BLAS_FAIL("cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as "
                   "an argument): shapes do not chain: op(A) is 4 x 5, op(B) 6 x 3, C 4 x 3, D 4 x 3",
                   cublasLtMatmulAlgoGetHeuristic, handle, desc, a, b, c, c, pref, 1, &h, &found);
  CHECK_EQ_INT(found, 0);
  EXPECT_BLAS_FAIL("cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as "
                   "an argument): matrix B: leading dimension 4 below its 5 rows",
                   cublasLtMatmulAlgoGetHeuristic, handle, desc, a, small_ld, c, c, pref, 1, &h, &found);
  uint32_t epi = CG_CUBLASLT_EPILOGUE_BIAS;
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cg_cublaslt_matrix_layout b_ok;
  TBLAS(cublasLtMatrixLayoutCreate, &b_ok, CG_CUDA_R_32F, 5, 3, 5);
  EXPECT_BLAS_FAIL("cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as "
                   "an argument): epilogue 4 needs CUBLASLT_MATMUL_DESC_BIAS_POINTER",
                   cublasLtMatmulAlgoGetHeuristic, handle, desc, a, b_ok, c, c, pref, 1, &h, &found);
  epi = 130; /* RELU_AUX: a bit mask, not emulated */
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  EXPECT_BLAS_FAIL("cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not "
                   "supported): epilogue 130 is not emulated",
                   cublasLtMatmulAlgoGetHeuristic, handle, desc, a, b_ok, c, c, pref, 1, &h, &found);
  epi = CG_CUBLASLT_EPILOGUE_DEFAULT;
  TBLAS(cublasLtMatmulDescSetAttribute, desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);

  /* B (5 x 3, ld 50) spans 2 * 50 + 5 floats, past its 15: the GPU faults */
  cg_cublaslt_matrix_layout b_far;
  TBLAS(cublasLtMatrixLayoutCreate, &b_far, CG_CUDA_R_32F, 5, 3, 50);
  cg_cu_deviceptr dA = t_upload(NULL, 4 * 5 * 4), dB = t_upload(NULL, 5 * 3 * 4), dC = t_upload(NULL, 4 * 3 * 4);
  float one = 1, zero = 0;
  TBLAS(cublasLtMatmul, handle, desc, &one, (void *)(uintptr_t)dA, a, (void *)(uintptr_t)dB, b_far, &zero,
        (void *)(uintptr_t)dC, c, (void *)(uintptr_t)dC, c, NULL, NULL, 0, NULL);
  char want[512];
  snprintf(want, sizeof want,
           "cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered): cublasLtMatmul: "
           "matrix B [%p, +420 bytes) is not inside one device allocation",
           (void *)(uintptr_t)dB);
  CHECK(CG_CU(&T_api, NULL, T_err, sizeof T_err, cuCtxSynchronize) == -1);
  CHECK_STR(T_err, want);
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
  cg_cublaslt_matrix_layout ls[] = {a, b, c, small_ld, b_ok, b_far};
  for (int i = 0; i < 6; i++) TBLAS(cublasLtMatrixLayoutDestroy, ls[i]);
  TBLAS(cublasLtMatmulPreferenceDestroy, pref);
  TBLAS(cublasLtMatmulDescDestroy, desc);
}

/* The algorithm is chosen for aligned operands: 256 bytes unless the
 * preference says less, and cublasLtMatmul refuses less (the backend then
 * chooses again: blaslt.c; test_cuda_kernels' chunked LM head needs it). */
static void test_alignment(void) {
  int n = 8;
  cg_cu_deviceptr dA, dB, dD;
  TCU(cuMemAlloc, &dA, (size_t)(n * n + 1) * 4);
  TCU(cuMemAlloc, &dB, (size_t)n * n * 4);
  TCU(cuMemAlloc, &dD, (size_t)n * n * 4);
  TCU(cuMemsetD8, dA, 0, (size_t)(n * n + 1) * 4);
  TCU(cuMemsetD8, dB, 0, (size_t)n * n * 4);
  cg_cublaslt_matmul_desc desc;
  cg_cublaslt_matrix_layout l;
  TBLAS(cublasLtMatmulDescCreate, &desc, CG_CUBLAS_COMPUTE_32F, CG_CUDA_R_32F);
  TBLAS(cublasLtMatrixLayoutCreate, &l, CG_CUDA_R_32F, (uint64_t)n, (uint64_t)n, n);
  float one = 1, zero = 0;
  for (int told = 0; told < 2; told++) {
    cg_cublaslt_preference pref;
    TBLAS(cublasLtMatmulPreferenceCreate, &pref);
    uint32_t four = 4;
    if (told) TBLAS(cublasLtMatmulPreferenceSetAttribute, pref, CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, sizeof four);
    cg_cublaslt_heuristic heur;
    int found = 0;
    TBLAS(cublasLtMatmulAlgoGetHeuristic, handle, desc, l, l, l, l, pref, 1, &heur, &found);
    CHECK_EQ_INT(found, 1);
    void *a4 = (void *)(uintptr_t)(dA + 4); /* 4-byte aligned */
    int rc = CG_CUBLAS(&T_api, NULL, T_err, sizeof T_err, cublasLtMatmul, handle, desc, &one, a4, l,
                       (void *)(uintptr_t)dB, l, &zero, (void *)(uintptr_t)dD, l, (void *)(uintptr_t)dD, l, &heur.algo,
                       NULL, 0, NULL);
    if (told) CHECK_EQ_INT(rc, 0);
    else {
      CHECK_EQ_INT(rc, -1);
      CHECK(strstr(T_err, "CUBLAS_STATUS_NOT_SUPPORTED") != NULL);
      CHECK(strstr(T_err, "is aligned to 4 bytes, less than the 256 the algorithm was chosen for "
                          "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES)") != NULL);
    }
    TBLAS(cublasLtMatmulPreferenceDestroy, pref);
  }
  TBLAS(cublasLtMatrixLayoutDestroy, l);
  TBLAS(cublasLtMatmulDescDestroy, desc);
  TCU(cuMemFree, dA);
  TCU(cuMemFree, dB);
  TCU(cuMemFree, dD);
}

int main(void) {
  t_emu_open(80, false, 256 << 20);
  TBLAS(cublasLtCreate, &handle);
  test_transposes_and_layouts();
  test_epilogues();
  test_wrong_calls_are_wrong();
  int64_t gemms = rt_cuda_emu_counters_get().gemms;
  CHECK(gemms >= 30);
  test_errors();
  test_alignment();
  TBLAS(cublasLtDestroy, handle);
  t_emu_close();
  return check_done();
}
