/* runtime/cuda_emu/blaslt_rules.c — cuBLASLt's descriptors, layouts,
 * preferences and heuristic, and what cublasLtMatmul checks before it runs
 * (blaslt_rules.h): the emulator's (blas.c runs the product after these
 * checks) and the CUDA stub's of the test suite (tests/cuda_stub/). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blaslt_rules.h"

size_t rt_emu_blaslt_type_bytes(uint32_t type) { return type == CG_CUDA_R_64F ? 8 : type == CG_CUDA_R_32F ? 4 : 2; }
#define type_bytes rt_emu_blaslt_type_bytes
#define fail rt_emu_blaslt_fail

/* ---- handles and attributes ---- */

const char *rt_emu_cublasLtGetStatusName(cg_cublas_status s) {
  const char *n = cg_cublas_status_name(s);
  return n ? n : "CUBLAS_STATUS_UNKNOWN";
}

const char *rt_emu_cublasLtGetStatusString(cg_cublas_status s) {
  const char *n = cg_cublas_status_string(s);
  return n ? n : "unknown status";
}

size_t rt_emu_cublasLtGetVersion(void) { return 130000; }

cg_cublas_status rt_emu_blaslt_fail(cg_cublas_status s, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  rt_emu_set_detail("%s", buf);
  return s;
}

cg_cublas_status rt_emu_cublasLtCreate(cg_cublaslt_handle *handle) {
  rt_emu_set_detail("%s", "");
  *handle = calloc(1, sizeof(struct cublasLtContext));
  return *handle ? CG_CUBLAS_STATUS_SUCCESS : CG_CUBLAS_STATUS_ALLOC_FAILED;
}

cg_cublas_status rt_emu_cublasLtDestroy(cg_cublaslt_handle handle) {
  if (!handle) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
  free(handle);
  return CG_CUBLAS_STATUS_SUCCESS;
}

static bool compute_known(uint32_t c) {
  return c == CG_CUBLAS_COMPUTE_32F || c == CG_CUBLAS_COMPUTE_32F_PEDANTIC || c == CG_CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CG_CUBLAS_COMPUTE_32F_FAST_16BF || c == CG_CUBLAS_COMPUTE_32F_FAST_TF32 || c == CG_CUBLAS_COMPUTE_64F;
}

cg_cublas_status rt_emu_cublasLtMatmulDescCreate(cg_cublaslt_matmul_desc *desc, cg_cublas_compute_type compute,
                                                     cg_cuda_data_type scale) {
  rt_emu_set_detail("%s", "");
  if (!compute_known(compute)) return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "compute type %u is not emulated", compute);
  emu_desc *d = calloc(1, sizeof *d);
  if (!d) return CG_CUBLAS_STATUS_ALLOC_FAILED;
  d->compute = compute, d->scale = scale;
  d->pointer_mode = CG_CUBLASLT_POINTER_MODE_HOST;
  d->transa = d->transb = d->transc = CG_CUBLAS_OP_N;
  d->epilogue = CG_CUBLASLT_EPILOGUE_DEFAULT;
  d->aux_type = d->bias_type = -1;
  *desc = (cg_cublaslt_matmul_desc)d;
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatmulDescDestroy(cg_cublaslt_matmul_desc desc) {
  free(desc);
  return CG_CUBLAS_STATUS_SUCCESS;
}

/* Copies buf into field when bytes is the attribute's size. */
#define SET_FIELD(field)                                                                                 \
  do {                                                                                                   \
    if (!buf || bytes != sizeof(field))                                                                  \
      return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "attribute %u takes %zu bytes, not %zu", attr, sizeof(field), bytes); \
    memcpy(&(field), buf, sizeof(field));                                                                \
    return CG_CUBLAS_STATUS_SUCCESS;                                                                     \
  } while (0)

cg_cublas_status rt_emu_cublasLtMatmulDescSetAttribute(cg_cublaslt_matmul_desc desc,
                                                           cg_cublaslt_matmul_desc_attribute attr, const void *buf,
                                                           size_t bytes) {
  rt_emu_set_detail("%s", "");
  emu_desc *d = (emu_desc *)desc;
  if (!d) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no descriptor");
  switch (attr) {
  case CG_CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: SET_FIELD(d->compute);
  case CG_CUBLASLT_MATMUL_DESC_SCALE_TYPE: SET_FIELD(d->scale);
  case CG_CUBLASLT_MATMUL_DESC_POINTER_MODE: SET_FIELD(d->pointer_mode);
  case CG_CUBLASLT_MATMUL_DESC_TRANSA: SET_FIELD(d->transa);
  case CG_CUBLASLT_MATMUL_DESC_TRANSB: SET_FIELD(d->transb);
  case CG_CUBLASLT_MATMUL_DESC_TRANSC: SET_FIELD(d->transc);
  case CG_CUBLASLT_MATMUL_DESC_EPILOGUE: SET_FIELD(d->epilogue);
  case CG_CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET_FIELD(d->bias);
  case CG_CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: SET_FIELD(d->bias_batch_stride);
  case CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: SET_FIELD(d->aux);
  case CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: SET_FIELD(d->aux_ld);
  case CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: SET_FIELD(d->aux_batch_stride);
  case CG_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: SET_FIELD(d->aux_type);
  case CG_CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: SET_FIELD(d->bias_type);
  default: return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %u is not emulated", attr);
  }
}

cg_cublas_status rt_emu_cublasLtMatrixLayoutCreate(cg_cublaslt_matrix_layout *layout, cg_cuda_data_type type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  rt_emu_set_detail("%s", "");
  emu_layout *l = calloc(1, sizeof *l);
  if (!l) return CG_CUBLAS_STATUS_ALLOC_FAILED;
  l->type = type, l->order = CG_CUBLASLT_ORDER_COL, l->rows = rows, l->cols = cols, l->ld = ld, l->batch = 1;
  *layout = (cg_cublaslt_matrix_layout)l;
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatrixLayoutDestroy(cg_cublaslt_matrix_layout layout) {
  free(layout);
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatrixLayoutSetAttribute(cg_cublaslt_matrix_layout layout,
                                                             cg_cublaslt_matrix_layout_attribute attr, const void *buf,
                                                             size_t bytes) {
  rt_emu_set_detail("%s", "");
  emu_layout *l = (emu_layout *)layout;
  if (!l) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no layout");
  switch (attr) {
  case CG_CUBLASLT_MATRIX_LAYOUT_TYPE: SET_FIELD(l->type);
  case CG_CUBLASLT_MATRIX_LAYOUT_ORDER: SET_FIELD(l->order);
  case CG_CUBLASLT_MATRIX_LAYOUT_ROWS: SET_FIELD(l->rows);
  case CG_CUBLASLT_MATRIX_LAYOUT_COLS: SET_FIELD(l->cols);
  case CG_CUBLASLT_MATRIX_LAYOUT_LD: SET_FIELD(l->ld);
  case CG_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: SET_FIELD(l->batch);
  case CG_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: SET_FIELD(l->stride);
  default: return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "matrix layout attribute %u is not emulated", attr);
  }
}

cg_cublas_status rt_emu_cublasLtMatmulPreferenceCreate(cg_cublaslt_preference *pref) {
  emu_pref *p = calloc(1, sizeof *p);
  if (!p) return CG_CUBLAS_STATUS_ALLOC_FAILED;
  *pref = (cg_cublaslt_preference)p;
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatmulPreferenceDestroy(cg_cublaslt_preference pref) {
  free(pref);
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatmulPreferenceSetAttribute(cg_cublaslt_preference pref,
                                                                 cg_cublaslt_preference_attribute attr,
                                                                 const void *buf, size_t bytes) {
  rt_emu_set_detail("%s", "");
  emu_pref *p = (emu_pref *)pref;
  if (!p) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no preference");
  switch (attr) {
  case CG_CUBLASLT_MATMUL_PREF_SEARCH_MODE: SET_FIELD(p->search_mode);
  case CG_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: SET_FIELD(p->workspace);
  case CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: SET_FIELD(p->min_align[0]);
  case CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: SET_FIELD(p->min_align[1]);
  case CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: SET_FIELD(p->min_align[2]);
  case CG_CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: SET_FIELD(p->min_align[3]);
  default: return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %u is not emulated", attr);
  }
}

/* ---- the problem ---- */

static bool type_ok(uint32_t t) {
  return t == CG_CUDA_R_32F || t == CG_CUDA_R_64F || t == CG_CUDA_R_16F || t == CG_CUDA_R_16BF;
}

static cg_cublas_status check_layout(const char *what, const emu_layout *l) {
  if (!type_ok(l->type)) return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: data type %u is not emulated", what, l->type);
  if (l->order != CG_CUBLASLT_ORDER_COL)
    return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: only column-major order is emulated", what);
  if (l->ld < (int64_t)l->rows || l->ld < 1)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "matrix %s: leading dimension %lld below its %llu rows", what,
                (long long)l->ld, (unsigned long long)l->rows);
  if (l->batch < 1) return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "matrix %s: batch count %d", what, l->batch);
  if (l->rows > INT32_MAX || l->cols > INT32_MAX)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "matrix %s: %llu x %llu is too large", what,
                (unsigned long long)l->rows, (unsigned long long)l->cols);
  return CG_CUBLAS_STATUS_SUCCESS;
}

/* Checks the operation the way cuBLASLt does before running it. */
static cg_cublas_status plan(emu_problem *p, const emu_desc *d, const emu_layout *a, const emu_layout *b,
                             const emu_layout *c, const emu_layout *dl) {
  memset(p, 0, sizeof *p);
  if (!d || !a || !b || !c || !dl) return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "a descriptor or layout is NULL");
  p->d = d, p->a = a, p->b = b, p->c = c, p->dl = dl;
  cg_cublas_status s;
  if ((s = check_layout("A", a)) || (s = check_layout("B", b)) || (s = check_layout("C", c)) ||
      (s = check_layout("D", dl)))
    return s;
  if (d->transc != CG_CUBLAS_OP_N) return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC must be CUBLAS_OP_N");
  for (int i = 0; i < 2; i++) {
    int32_t t = i ? d->transb : d->transa;
    if (t != CG_CUBLAS_OP_N && t != CG_CUBLAS_OP_T)
      return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "TRANS%c %d is not emulated (N or T)", i ? 'B' : 'A', t);
  }
  bool ta = d->transa == CG_CUBLAS_OP_T, tb = d->transb == CG_CUBLAS_OP_T;
  p->m = (int)(ta ? a->cols : a->rows);
  p->k = (int)(ta ? a->rows : a->cols);
  int kb = (int)(tb ? b->cols : b->rows);
  p->n = (int)(tb ? b->rows : b->cols);
  if (kb != p->k || c->rows != (uint64_t)p->m || c->cols != (uint64_t)p->n || dl->rows != c->rows ||
      dl->cols != c->cols)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE,
                "shapes do not chain: op(A) is %d x %d, op(B) %d x %d, C %llu x %llu, D %llu x %llu", p->m, p->k, kb,
                p->n, (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)dl->rows,
                (unsigned long long)dl->cols);
  p->batch = dl->batch;
  if (a->batch != p->batch || b->batch != p->batch || c->batch != p->batch)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A %d, B %d, C %d, D %d", a->batch, b->batch,
                c->batch, dl->batch);
  bool f64 = d->compute == CG_CUBLAS_COMPUTE_64F;
  if (f64 ? (a->type != CG_CUDA_R_64F || b->type != CG_CUDA_R_64F || c->type != CG_CUDA_R_64F ||
             dl->type != CG_CUDA_R_64F || d->scale != CG_CUDA_R_64F)
          : (a->type == CG_CUDA_R_64F || b->type != a->type || c->type != dl->type ||
             (dl->type != CG_CUDA_R_32F && dl->type != a->type) || d->scale != CG_CUDA_R_32F))
    return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED,
                "types A %u, B %u, C %u, D %u with compute %u and scale %u are not a combination cuBLASLt runs",
                a->type, b->type, c->type, dl->type, d->compute, d->scale);
  if (d->pointer_mode != CG_CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CG_CUBLASLT_POINTER_MODE_DEVICE)
    return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d is not emulated", d->pointer_mode);
  switch (d->epilogue) {
  case CG_CUBLASLT_EPILOGUE_DEFAULT: break;
  case CG_CUBLASLT_EPILOGUE_RELU: p->relu = true; break;
  case CG_CUBLASLT_EPILOGUE_BIAS: p->bias = true; break;
  case CG_CUBLASLT_EPILOGUE_RELU_BIAS: p->relu = p->bias = true; break;
  case CG_CUBLASLT_EPILOGUE_GELU: p->gelu = true; break;
  case CG_CUBLASLT_EPILOGUE_GELU_BIAS: p->gelu = p->bias = true; break;
  case CG_CUBLASLT_EPILOGUE_GELU_AUX: p->gelu = p->aux_out = true; break;
  case CG_CUBLASLT_EPILOGUE_GELU_AUX_BIAS: p->gelu = p->aux_out = p->bias = true; break;
  case CG_CUBLASLT_EPILOGUE_DGELU: p->dgelu = true; break;
  case CG_CUBLASLT_EPILOGUE_DGELU_BGRAD: p->dgelu = p->bgrad = true; break;
  case CG_CUBLASLT_EPILOGUE_BGRADA: p->bgrada = true; break;
  case CG_CUBLASLT_EPILOGUE_BGRADB: p->bgradb = true; break;
  default: return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not emulated", d->epilogue);
  }
  p->bias_type = d->bias_type >= 0 ? (uint32_t)d->bias_type : dl->type;
  p->aux_type = d->aux_type >= 0 ? (uint32_t)d->aux_type : dl->type;
  if ((p->bias || p->bgrad || p->bgrada || p->bgradb) && !d->bias)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", d->epilogue);
  if ((p->aux_out || p->dgelu) && (!d->aux || d->aux_ld < p->m))
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE,
                "epilogue %u needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER and an AUX_LD of at least %d (it is %lld)",
                d->epilogue, p->m, (long long)d->aux_ld);
  if ((p->bias || p->bgrad || p->bgrada || p->bgradb) && !type_ok(p->bias_type))
    return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED, "bias data type %u", p->bias_type);
  return CG_CUBLAS_STATUS_SUCCESS;
}

cg_cublas_status rt_emu_cublasLtMatmulAlgoGetHeuristic(cg_cublaslt_handle handle, cg_cublaslt_matmul_desc desc,
                                                           cg_cublaslt_matrix_layout a, cg_cublaslt_matrix_layout b,
                                                           cg_cublaslt_matrix_layout c, cg_cublaslt_matrix_layout d,
                                                           cg_cublaslt_preference pref, int requested,
                                                           cg_cublaslt_heuristic *results, int *returned) {
  rt_emu_set_detail("%s", "");
  if (!handle) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
  if (!pref || requested < 1 || !results || !returned)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "heuristic arguments (requested %d)", requested);
  *returned = 0;
  emu_problem p;
  cg_cublas_status s = plan(&p, (const emu_desc *)desc, (const emu_layout *)a, (const emu_layout *)b,
                            (const emu_layout *)c, (const emu_layout *)d);
  if (s != CG_CUBLAS_STATUS_SUCCESS) return s;
  memset(&results[0], 0, sizeof results[0]);
  /* The algorithm holds the operand alignments it was chosen for (the
   * preference's minimums, 256 bytes by default: cuBLASLt picks kernels that
   * assume them); cublasLtMatmul refuses pointers aligned less. */
  const emu_pref *pr = (const emu_pref *)pref;
  for (int i = 0; i < 4; i++) results[0].algo.data[i] = pr->min_align[i] ? pr->min_align[i] : 256;
  results[0].state = CG_CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CG_CUBLAS_STATUS_SUCCESS;
}

/* ---- what cublasLtMatmul checks ---- */

/* The bytes a strided batch of a layout touches: one past its last element. */
static size_t footprint(const emu_layout *l, int batch, int64_t stride) {
  size_t last = (size_t)((int64_t)(batch - 1) * stride + (int64_t)(l->cols - 1) * l->ld + (int64_t)l->rows);
  return l->rows && l->cols ? last * type_bytes(l->type) : 0;
}

static bool in_device(const char *what, const void *ptr, size_t bytes) {
  if (!bytes || rt_emu_device_range((uint64_t)(uintptr_t)ptr, bytes) == 1) return true;
  char msg[512];
  snprintf(msg, sizeof msg, "cublasLtMatmul: %s [%p, +%zu bytes) is not inside one device allocation", what, ptr,
           bytes);
  rt_emu_set_sticky(CG_CUDA_ERROR_ILLEGAL_ADDRESS, msg);
  return false;
}

/* cublasLtMatmul: its checks in cuBLASLt's order (the handle, a sticky
 * error, the problem, alpha and beta, each operand's alignment against the
 * algorithm's, the workspace's 256 bytes as documented, every range in
 * device memory), then the filler's product (rt_emu_blaslt_run). An
 * operand outside the device allocations is not refused: the "launch"
 * succeeds and the fault is sticky (CUDA_ERROR_ILLEGAL_ADDRESS), as on a
 * GPU. */
/* A product recorded by a capture (capture.c): the problem with copies of
 * the descriptor and layouts as they were (their pointers, bias and aux
 * included: cuBLASLt bakes them into its kernels' parameters), the
 * scalars' values and the operands. Replayed after the checks passed. */
typedef struct {
  emu_problem p;
  emu_desc desc;
  emu_layout a, b, c, d;
  double alpha, beta;
  const void *pa, *pb, *pc;
  void *pd;
} recorded_matmul;

static cg_cu_result replay_matmul(const void *payload, cg_cu_stream s) {
  recorded_matmul m = *(const recorded_matmul *)payload;
  m.p.d = &m.desc, m.p.a = &m.a, m.p.b = &m.b, m.p.c = &m.c, m.p.dl = &m.d;
  return rt_emu_blaslt_run(&m.p, m.alpha, m.beta, m.pa, m.pb, m.pc, m.pd, s) == CG_CUBLAS_STATUS_SUCCESS
             ? CG_CUDA_SUCCESS
             : CG_CUDA_ERROR_LAUNCH_FAILED;
}

static cg_cublas_status record_matmul(const emu_problem *p, double alpha, double beta, const void *a, const void *b,
                                      const void *c, void *d, cg_cu_stream stream) {
  recorded_matmul m = {*p, *p->d, *p->a, *p->b, *p->c, *p->dl, alpha, beta, a, b, c, d};
  return rt_emu_capture_node(stream, replay_matmul, &m, sizeof m) == CG_CUDA_SUCCESS ? CG_CUBLAS_STATUS_SUCCESS
                                                                                    : CG_CUBLAS_STATUS_EXECUTION_FAILED;
}

cg_cublas_status rt_emu_cublasLtMatmul(cg_cublaslt_handle handle, cg_cublaslt_matmul_desc desc, const void *alpha,
                                       const void *a, cg_cublaslt_matrix_layout a_layout, const void *b,
                                       cg_cublaslt_matrix_layout b_layout, const void *beta, const void *c,
                                       cg_cublaslt_matrix_layout c_layout, void *d, cg_cublaslt_matrix_layout d_layout,
                                       const cg_cublaslt_algo *algo, void *workspace, size_t workspace_bytes,
                                       cg_cu_stream stream) {
  emu_problem problem, *p = &problem;
  rt_emu_set_detail("%s", "");
  if (!handle) return fail(CG_CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
  const char *sticky_detail;
  if (rt_emu_sticky_error(&sticky_detail) != CG_CUDA_SUCCESS)
    return fail(CG_CUBLAS_STATUS_EXECUTION_FAILED, "%s", sticky_detail);
  cg_cublas_status s = plan(p, (const emu_desc *)desc, (const emu_layout *)a_layout, (const emu_layout *)b_layout,
                            (const emu_layout *)c_layout, (const emu_layout *)d_layout);
  if (s != CG_CUBLAS_STATUS_SUCCESS) return s;
  if (!alpha || !beta) return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is NULL");
  const emu_desc *dd = p->d;
  bool f64 = dd->compute == CG_CUBLAS_COMPUTE_64F;
  double al = f64 ? *(const double *)alpha : *(const float *)alpha;
  double be = f64 ? *(const double *)beta : *(const float *)beta;
  if (algo) { /* each operand at least as aligned as the algorithm was chosen for */
    static const char *const names[4] = {"A", "B", "C", "D"};
    const void *ptrs[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
      uint64_t want = algo->data[i], at = (uint64_t)(uintptr_t)ptrs[i];
      if (want > 1 && (at % want) != 0)
        return fail(CG_CUBLAS_STATUS_NOT_SUPPORTED,
                    "matrix %s at %p is aligned to %llu bytes, less than the %llu the algorithm was chosen for "
                    "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES)",
                    names[i], ptrs[i], (unsigned long long)(at & (~at + 1)), (unsigned long long)want, names[i]);
    }
  }
  if (workspace_bytes && ((uintptr_t)workspace % 256) != 0)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "the workspace at %p is not 256-byte aligned", workspace);
  if (workspace_bytes && rt_emu_device_range((uint64_t)(uintptr_t)workspace, workspace_bytes) != 1)
    return fail(CG_CUBLAS_STATUS_INVALID_VALUE, "the workspace [%p, +%zu bytes) is not inside one device allocation",
                workspace, workspace_bytes);
  /* what a GPU would touch must be device memory: else an illegal address */
  size_t bias_len = p->bgradb ? (size_t)p->n : (size_t)p->m;
  if (!in_device("matrix A", a, footprint(p->a, p->batch, p->a->stride)) ||
      !in_device("matrix B", b, footprint(p->b, p->batch, p->b->stride)) ||
      (be != 0 && !in_device("matrix C", c, footprint(p->c, p->batch, p->c->stride))) ||
      !in_device("matrix D", d, footprint(p->dl, p->batch, p->dl->stride)) ||
      ((p->bias || p->bgrad || p->bgrada || p->bgradb) &&
       !in_device("the bias vector", dd->bias,
                  ((size_t)(p->batch - 1) * (size_t)dd->bias_batch_stride + bias_len) * type_bytes(p->bias_type))) ||
      ((p->aux_out || p->dgelu) &&
       !in_device("the aux matrix", dd->aux,
                  ((size_t)(p->batch - 1) * (size_t)dd->aux_batch_stride + (size_t)(p->n - 1) * (size_t)dd->aux_ld +
                   (size_t)p->m) * type_bytes(p->aux_type))))
    return CG_CUBLAS_STATUS_SUCCESS;
  if (rt_emu_capturing(stream)) return record_matmul(p, al, be, a, b, c, d, stream);
  return rt_emu_blaslt_run(p, al, be, a, b, c, d, stream);
}
