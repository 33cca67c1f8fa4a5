/* runtime/cuda/blaslt.c — the cuda backends' matrix products: a cg_gemm
 * (row-major, codegen.h) as one cublasLtMatmul.
 *
 * Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T op(A)^T,
 * and a row-major matrix read column-major is its transpose. So cuBLASLt's
 * A is our b (transposed for it exactly when b is read transposed), its B
 * is our a, and its C = D is our c with n rows and m columns; every leading
 * dimension is the row-major one. A bias along our n is cuBLASLt's bias
 * along the rows of D; the DGELU aux matrix has D's layout. The batch
 * strides follow the same swap. So a bias gradient over our b's columns
 * (CG_EPI_BGRAD_B: its sum over k) is cuBLASLt's BGRADA, written to the
 * bias pointer, of length n.
 *
 * Types: f32 computes in fp32 (CUBLAS_COMPUTE_32F: no TF32, so results
 * stay within the CPU's fp32 tolerance), bf16 / f16 in fp32 with 16-bit
 * inputs and outputs, f64 in fp64. Descriptors, layouts and the algorithm
 * (the heuristic's first) are made once per product when the program is
 * prepared; only the bias and aux pointers are set at each run. When the
 * heuristic has no algorithm with the epilogue (some cuBLASLt versions
 * lack some combinations) the product runs plain and the epilogue kernel
 * the lowering generated for it follows (the backend launches it).
 *
 * Alignment: cuBLASLt's heuristic assumes 256-byte aligned operands unless
 * told less (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), and the algorithm
 * it returns may need that. The addresses are known only at run time (a
 * view's offset, a chunk of rows), so each run compares the operands' real
 * alignment with the one the algorithm was chosen for, and a less aligned
 * operand gets a new algorithm, chosen for the real alignments and the
 * real bias / aux pointers, kept for the later runs. A cublasLtMatmul
 * refused all the same (NOT_SUPPORTED, INVALID_VALUE) is retried once with
 * an algorithm for the smallest alignments, the element size. Both count
 * in gemm_replans.
 */
#include <string.h>

#include "backend_internal.h"

static cg_cuda_data_type data_type(ir_dtype t) {
  switch (t) {
  case IR_DT_F64: return CG_CUDA_R_64F;
  case IR_DT_BF16: return CG_CUDA_R_16BF;
  case IR_DT_F16: return CG_CUDA_R_16F;
  default: return CG_CUDA_R_32F;
  }
}

static unsigned epilogue_code(cg_epilogue e) {
  switch (e) {
  case CG_EPI_BIAS: return CG_CUBLASLT_EPILOGUE_BIAS;
  case CG_EPI_RELU_BIAS: return CG_CUBLASLT_EPILOGUE_RELU_BIAS;
  case CG_EPI_GELU_BIAS: return CG_CUBLASLT_EPILOGUE_GELU_BIAS;
  case CG_EPI_DGELU: return CG_CUBLASLT_EPILOGUE_DGELU;
  case CG_EPI_BGRAD_B: return CG_CUBLASLT_EPILOGUE_BGRADA; /* our B is cuBLASLt's A (column-major) */
  default: return CG_CUBLASLT_EPILOGUE_DEFAULT;
  }
}

#define LT(x, ctx, err, errlen, fn, ...) CG_CUBLAS(&(x)->api, ctx, err, errlen, fn, __VA_ARGS__)

static int layout(cuda_ctx *x, cg_cublaslt_matrix_layout *l, cg_cuda_data_type t, int64_t rows, int64_t cols,
                  int64_t ld, int64_t batch, int64_t stride, const char *context, char *err, size_t errlen) {
  if (LT(x, context, err, errlen, cublasLtMatrixLayoutCreate, l, t, (uint64_t)rows, (uint64_t)cols, ld)) return -1;
  int32_t b = (int32_t)batch;
  if (batch > 1 && (LT(x, context, err, errlen, cublasLtMatrixLayoutSetAttribute, *l, CG_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                       &b, sizeof b) ||
                    LT(x, context, err, errlen, cublasLtMatrixLayoutSetAttribute, *l,
                       CG_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride)))
    return -1;
  return 0;
}

/* The descriptor with epilogue e (DEFAULT for CG_EPI_NONE). */
static int descriptor(cuda_ctx *x, const cg_gemm *g, cg_epilogue e, cuda_gemm_plan *p, const char *context, char *err,
                      size_t errlen) {
  cg_cublas_compute_type compute = p->f64 ? CG_CUBLAS_COMPUTE_64F : CG_CUBLAS_COMPUTE_32F;
  cg_cuda_data_type scale = p->f64 ? CG_CUDA_R_64F : CG_CUDA_R_32F;
  if (LT(x, context, err, errlen, cublasLtMatmulDescCreate, &p->desc, compute, scale)) return -1;
  int32_t ta = g->trans_b ? CG_CUBLAS_OP_T : CG_CUBLAS_OP_N, tb = g->trans_a ? CG_CUBLAS_OP_T : CG_CUBLAS_OP_N;
  uint32_t epi = epilogue_code(e);
  if (LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc, CG_CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
      LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc, CG_CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
      LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
         sizeof epi))
    return -1;
  if (e == CG_EPI_DGELU) {
    int64_t ld = g->ldc, stride = g->stride_c;
    if (LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc, CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
           sizeof ld) ||
        (g->batch > 1 && LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc,
                            CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride, sizeof stride)))
      return -1;
  }
  return 0;
}

/* Bias / aux pointers for the heuristic and the run: any aligned non-null
 * address will do for the heuristic (it reads nothing); the run sets the
 * real ones. */
#define HEURISTIC_ADDRESS ((cg_cu_deviceptr)256)
static int set_pointers(cuda_ctx *x, cuda_gemm_plan *p, cg_epilogue e, cg_cu_deviceptr bias, cg_cu_deviceptr aux,
                        const char *context, char *err, size_t errlen) {
  void *bp = (void *)(uintptr_t)bias, *ap = (void *)(uintptr_t)aux;
  if ((e == CG_EPI_BIAS || e == CG_EPI_GELU_BIAS || e == CG_EPI_RELU_BIAS || e == CG_EPI_BGRAD_B) &&
      LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc, CG_CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
         sizeof bp))
    return -1;
  if (e == CG_EPI_DGELU && LT(x, context, err, errlen, cublasLtMatmulDescSetAttribute, p->desc,
                              CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap))
    return -1;
  return 0;
}

/* The heuristic's first algorithm for operands aligned as p->align says:
 * 1 found, 0 none, -1 a failed call. */
static int find_algo(cuda_ctx *x, cuda_gemm_plan *p, const char *context, char *err, size_t errlen) {
  cg_cublaslt_preference pref = NULL;
  uint64_t ws = x->lt_workspace_bytes;
  if (LT(x, context, err, errlen, cublasLtMatmulPreferenceCreate, &pref)) return -1;
  int rc = -1;
  static const cg_cublaslt_preference_attribute align_attr[4] = {
      CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  bool set = !LT(x, context, err, errlen, cublasLtMatmulPreferenceSetAttribute, pref,
                 CG_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (int i = 0; set && i < 4; i++)
    set = !LT(x, context, err, errlen, cublasLtMatmulPreferenceSetAttribute, pref, align_attr[i], &p->align[i],
              sizeof p->align[i]);
  if (set) {
    cg_cublaslt_heuristic h;
    int found = 0;
    cg_cublas_status s = x->api.cublasLtMatmulAlgoGetHeuristic(x->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &h, &found);
    if (s == CG_CUBLAS_STATUS_SUCCESS && found > 0 && h.state == CG_CUBLAS_STATUS_SUCCESS) {
      p->algo = h.algo;
      rc = 1;
    } else if (s == CG_CUBLAS_STATUS_SUCCESS || s == CG_CUBLAS_STATUS_NOT_SUPPORTED) {
      rc = 0;
      cg_cublas_check(&x->api, s == CG_CUBLAS_STATUS_SUCCESS ? CG_CUBLAS_STATUS_NOT_SUPPORTED : s,
                      "cublasLtMatmulAlgoGetHeuristic", context, err, errlen);
    } else {
      cg_cublas_check(&x->api, s, "cublasLtMatmulAlgoGetHeuristic", context, err, errlen);
    }
  }
  x->api.cublasLtMatmulPreferenceDestroy(pref);
  return rc;
}

void cuda_gemm_release(cuda_ctx *x, cuda_gemm_plan *p) {
  if (p->desc) x->api.cublasLtMatmulDescDestroy(p->desc);
  if (p->a) x->api.cublasLtMatrixLayoutDestroy(p->a);
  if (p->b) x->api.cublasLtMatrixLayoutDestroy(p->b);
  if (p->c) x->api.cublasLtMatrixLayoutDestroy(p->c);
  memset(p, 0, sizeof *p);
}

/* The descriptor and algorithm for p's alignments, the heuristic shown the
 * bias and aux pointers given: g's epilogue, else (none found, and g has
 * a fallback kernel) a plain product and use_fallback. */
static int choose(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, cg_cu_deviceptr bias, cg_cu_deviceptr aux,
                  const char *context, char *err, size_t errlen) {
  if (p->desc) x->api.cublasLtMatmulDescDestroy(p->desc);
  p->desc = NULL;
  cg_epilogue e = x->no_epilogues && g->fallback_kernel >= 0 ? CG_EPI_NONE : g->epilogue;
  for (;;) {
    if (descriptor(x, g, e, p, context, err, errlen) || set_pointers(x, p, e, bias, aux, context, err, errlen))
      return -1;
    int found = find_algo(x, p, context, err, errlen);
    if (found < 0) return -1;
    if (found) break;
    if (e == CG_EPI_NONE || g->fallback_kernel < 0) return -1; /* err: the heuristic's refusal */
    x->api.cublasLtMatmulDescDestroy(p->desc);
    p->desc = NULL;
    e = CG_EPI_NONE; /* a plain product, then the epilogue kernel */
  }
  bool fallback = e == CG_EPI_NONE && g->epilogue != CG_EPI_NONE;
  if (fallback && !p->use_fallback) x->stats.epilogue_fallbacks++;
  p->use_fallback = fallback;
  return 0;
}

/* The alignment of a device address, at most 256 bytes (0: 256). */
static uint32_t alignment_of(cg_cu_deviceptr at) {
  uint32_t a = 1;
  while (a < 256 && (at & a) == 0) a <<= 1;
  return a;
}

int cuda_gemm_prepare(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, const char *context, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < 5; i++) p->align[i] = 256; /* cuBLASLt's default assumption; run checks it */
  p->f64 = g->dtype == IR_DT_F64;
  cg_cuda_data_type t = data_type(g->dtype);
  /* cuBLASLt's A = our b: n x k when not transposed for it */
  if (layout(x, &p->a, t, g->trans_b ? g->k : g->n, g->trans_b ? g->n : g->k, g->ldb, g->batch, g->stride_b, context, err,
             errlen) ||
      layout(x, &p->b, t, g->trans_a ? g->m : g->k, g->trans_a ? g->k : g->m, g->lda, g->batch, g->stride_a, context, err,
             errlen) ||
      layout(x, &p->c, t, g->n, g->m, g->ldc, g->batch, g->stride_c, context, err, errlen))
    return -1;
  return choose(x, g, p, HEURISTIC_ADDRESS, HEURISTIC_ADDRESS, context, err, errlen);
}

static cg_cublas_status run_once(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, cg_cu_deviceptr a,
                                 cg_cu_deviceptr b, cg_cu_deviceptr c, cg_cu_deviceptr bias, cg_cu_deviceptr aux);

int cuda_gemm_run(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, cg_cu_deviceptr a, cg_cu_deviceptr b,
                  cg_cu_deviceptr c, cg_cu_deviceptr bias, cg_cu_deviceptr aux, const char *context, char *err,
                  size_t errlen) {
  /* cuBLASLt's A, B, C, D are our b, a, c, c */
  uint32_t have[5] = {alignment_of(b), alignment_of(a), alignment_of(c), alignment_of(c),
                      g->epilogue != CG_EPI_NONE && bias ? alignment_of(bias) : 256};
  bool less = false;
  for (int i = 0; i < 5; i++) less = less || have[i] < p->align[i];
  if (less) {
    for (int i = 0; i < 5; i++) p->align[i] = have[i] < p->align[i] ? have[i] : p->align[i];
    x->stats.gemm_replans++;
    if (choose(x, g, p, bias, aux, context, err, errlen)) return -1;
  }
  for (int attempt = 0;; attempt++) {
    cg_cublas_status s = run_once(x, g, p, a, b, c, bias, aux);
    if (s == CG_CUBLAS_STATUS_SUCCESS) return 0;
    uint32_t elem = p->f64 ? 8 : data_type(g->dtype) == CG_CUDA_R_32F ? 4 : 2;
    bool smallest = true;
    for (int i = 0; i < 4; i++) smallest = smallest && p->align[i] <= elem;
    if (attempt > 0 || smallest || (s != CG_CUBLAS_STATUS_NOT_SUPPORTED && s != CG_CUBLAS_STATUS_INVALID_VALUE))
      return cg_cublas_check(&x->api, s, "cublasLtMatmul", context, err, errlen);
    for (int i = 0; i < 5; i++) p->align[i] = elem; /* once more, for the smallest alignments */
    x->stats.gemm_replans++;
    if (choose(x, g, p, bias, aux, context, err, errlen)) return -1;
  }
}

/* One cublasLtMatmul with p's algorithm; its status. */
static cg_cublas_status run_once(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, cg_cu_deviceptr a,
                                 cg_cu_deviceptr b, cg_cu_deviceptr c, cg_cu_deviceptr bias, cg_cu_deviceptr aux) {
  char ignored[256];
  cg_epilogue e = p->use_fallback ? CG_EPI_NONE : g->epilogue;
  if (x->no_epilogues && g->fallback_kernel >= 0) e = CG_EPI_NONE;
  if (set_pointers(x, p, e, bias, aux, NULL, ignored, sizeof ignored)) return CG_CUBLAS_STATUS_INVALID_VALUE;
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
  const void *alpha = p->f64 ? (const void *)&one_d : (const void *)&one_f;
  const void *beta = p->f64 ? (const void *)(g->accumulate ? &one_d : &zero_d) : (const void *)(g->accumulate ? &one_f : &zero_f);
  void *pa = (void *)(uintptr_t)b, *pb = (void *)(uintptr_t)a, *pc = (void *)(uintptr_t)c;
  x->stats.gemms++;
  return x->api.cublasLtMatmul(x->lt, p->desc, alpha, pa, p->a, pb, p->b, beta, pc, p->c, pc, p->c, &p->algo,
                               (void *)(uintptr_t)x->lt_workspace, x->lt_workspace_bytes, x->stream);
}
