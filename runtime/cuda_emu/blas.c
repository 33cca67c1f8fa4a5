/* runtime/cuda_emu/blas.c — cuBLASLt on the CPU, under cuBLAS's own
 * contract: matrices are column-major with the leading dimensions and
 * transposes the layouts and the descriptor say, so code that passes a
 * wrong flag or leading dimension gets the wrong answer here, as it would
 * on a GPU. The product itself is OpenBLAS's sgemm/dgemm called with those
 * same flags and leading dimensions (bf16/f16 operands are widened to
 * float first, keeping their layout).
 *
 *   D = epilogue(alpha * op(A) op(B) + beta * C)      per batch, strided
 * Epilogues: DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX,
 * GELU_AUX_BIAS (tanh GELU; AUX stores its input), DGELU, DGELU_BGRAD (the
 * product times GELU'(aux); BGRAD sums it over columns), BGRADA / BGRADB
 * (the sums of op(A) over k per row / of op(B) over k per column). Bias
 * vectors have D's type unless BIAS_DATA_TYPE says otherwise, as do aux
 * matrices; bias gradients are summed in double and rounded once.
 *
 * The descriptors, the heuristic and every check before the product are
 * blaslt_rules.c's (shared with the test suite's CUDA stub).
 *
 * What a GPU would fault on asynchronously (a matrix, bias or aux range
 * outside the device allocations) is made the emulator's sticky
 * CUDA_ERROR_ILLEGAL_ADDRESS, reported by the next driver call. Not
 * emulated: the fast compute modes' reduced precision (FAST_TF32 etc. run
 * in full fp32), row-major and other orders, ReLU bit masks, fp8. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blaslt_rules.h"
#include "gemm.h"
#include "ir.h"

#define type_bytes rt_emu_blaslt_type_bytes
#define fail rt_emu_blaslt_fail

/* ---- element conversions (CUDA's: NaN becomes the canonical 0x7fff) ---- */

/* cuBLAS's column-major product C[m x n] (ldc m) = op(A) op(B), with A and
 * B under their own leading dimensions, by the CPU's GEMM (runtime/cpu/gemm.c,
 * row-major): the column-major C is the row-major C^T = op(B)^T op(A)^T,
 * and a column-major matrix is its transpose read row-major. */
static int colmajor_sgemm(bool ta, bool tb, int m, int n, int k, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float *c) {
  return rt_sgemm(tb, ta, n, m, k, b, ldb, a, lda, c, m);
}
static int colmajor_dgemm(bool ta, bool tb, int m, int n, int k, const double *a, int64_t lda, const double *b,
                          int64_t ldb, double *c) {
  return rt_dgemm(tb, ta, n, m, k, b, ldb, a, lda, c, m);
}

static float load(const void *p, uint32_t type, size_t i) {
  switch (type) {
  case CG_CUDA_R_32F: return ((const float *)p)[i];
  case CG_CUDA_R_64F: return (float)((const double *)p)[i];
  case CG_CUDA_R_16BF: return ir_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ir_f16_to_f32(((const uint16_t *)p)[i]);
  }
}

static void store(void *p, uint32_t type, size_t i, double v) {
  float f = (float)v;
  switch (type) {
  case CG_CUDA_R_32F: ((float *)p)[i] = f; break;
  case CG_CUDA_R_64F: ((double *)p)[i] = v; break;
  case CG_CUDA_R_16BF: ((uint16_t *)p)[i] = f != f ? 0x7fff : ir_f32_to_bf16(f); break;
  default: ((uint16_t *)p)[i] = f != f ? 0x7fff : ir_f32_to_f16(f); break;
  }
}

static double gelu(double x) {
  const double s = 0.7978845608028654; /* sqrt(2 / pi) */
  return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

static double gelu_grad(double x) {
  const double s = 0.7978845608028654;
  double th = tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

/* Widens a bf16/f16 matrix to float, keeping its leading dimension. */
static float *widen(const void *src, const emu_layout *l) {
  float *f = malloc((size_t)l->ld * (size_t)l->cols * sizeof *f + 1);
  if (!f) return NULL;
  for (uint64_t j = 0; j < l->cols; j++)
    for (uint64_t i = 0; i < l->rows; i++) f[i + j * (size_t)l->ld] = load(src, l->type, i + j * (size_t)l->ld);
  return f;
}

cg_cublas_status rt_emu_blaslt_run(const emu_problem *pp, double al, double be, const void *a, const void *b,
                                   const void *c, void *d, cg_cu_stream stream) {
  const void *operands[4] = {a, b, c, d}; /* the start of each: in flight on another stream? */
  for (int i = 0; i < 4; i++)
    if (operands[i] && rt_emu_nccl_touch("cublasLtMatmul", stream,
                                         (uint64_t)(uintptr_t)operands[i], 1) != CG_CUDA_SUCCESS)
      return rt_emu_blaslt_fail(CG_CUBLAS_STATUS_EXECUTION_FAILED, "%s", rt_emu_detail());
  const emu_problem p = *pp;
  rt_emu_counters()->gemms++;
  const emu_desc *dd = p.d;
  bool f64 = dd->compute == CG_CUBLAS_COMPUTE_64F;
  bool ta = dd->transa == CG_CUBLAS_OP_T, tb = dd->transb == CG_CUBLAS_OP_T;
  size_t mn = (size_t)p.m * (size_t)p.n;
  double *t = malloc((mn ? mn : 1) * sizeof *t);
  float *tf = f64 ? NULL : malloc((mn ? mn : 1) * sizeof *tf);
  if (!t || (!f64 && !tf)) {
    free(t), free(tf);
    return fail(CG_CUBLAS_STATUS_ALLOC_FAILED, "out of host memory for %d x %d", p.m, p.n);
  }
  for (int bi = 0; bi < p.batch; bi++) {
    const char *ab = (const char *)a + (size_t)bi * (size_t)p.a->stride * type_bytes(p.a->type);
    const char *bb = (const char *)b + (size_t)bi * (size_t)p.b->stride * type_bytes(p.b->type);
    const char *cb = (const char *)c + (size_t)bi * (size_t)p.c->stride * type_bytes(p.c->type);
    char *db = (char *)d + (size_t)bi * (size_t)p.dl->stride * type_bytes(p.dl->type);
    /* the product, under the operands' own transposes and leading dimensions */
    if (f64) {
      double *td = t;
      if (p.m && p.n && colmajor_dgemm(ta, tb, p.m, p.n, p.k, (const double *)ab, p.a->ld, (const double *)bb,
                                       p.b->ld, td) != 0) {
        free(t), free(tf);
        return fail(CG_CUBLAS_STATUS_ALLOC_FAILED, "out of host memory");
      }
      for (size_t i = 0; i < mn; i++) td[i] *= al;
    } else {
      float *wa = p.a->type == CG_CUDA_R_32F ? NULL : widen(ab, p.a);
      float *wb = p.b->type == CG_CUDA_R_32F ? NULL : widen(bb, p.b);
      if ((p.a->type != CG_CUDA_R_32F && !wa) || (p.b->type != CG_CUDA_R_32F && !wb)) {
        free(wa), free(wb), free(t), free(tf);
        return fail(CG_CUBLAS_STATUS_ALLOC_FAILED, "out of host memory");
      }
      if (p.m && p.n && colmajor_sgemm(ta, tb, p.m, p.n, p.k, wa ? wa : (const float *)ab, p.a->ld,
                                       wb ? wb : (const float *)bb, p.b->ld, tf) != 0) {
        free(wa), free(wb), free(t), free(tf);
        return fail(CG_CUBLAS_STATUS_ALLOC_FAILED, "out of host memory");
      }
      for (size_t i = 0; i < mn; i++) t[i] = (float)al * tf[i];
      /* bias gradients of the operands */
      if (p.bgrada || p.bgradb) {
        void *bias = (char *)dd->bias + (size_t)bi * (size_t)dd->bias_batch_stride * type_bytes(p.bias_type);
        const float *op = p.bgrada ? (wa ? wa : (const float *)ab) : (wb ? wb : (const float *)bb);
        int64_t ld = p.bgrada ? p.a->ld : p.b->ld;
        bool trans = p.bgrada ? ta : tb;
        int len = p.bgrada ? p.m : p.n;
        for (int i = 0; i < len; i++) {
          double sum = 0;
          for (int kk = 0; kk < p.k; kk++) {
            /* op(A)[i][kk] or op(B)[kk][i] */
            size_t at = p.bgrada ? (trans ? (size_t)kk + (size_t)i * (size_t)ld : (size_t)i + (size_t)kk * (size_t)ld)
                                 : (trans ? (size_t)i + (size_t)kk * (size_t)ld : (size_t)kk + (size_t)i * (size_t)ld);
            sum += op[at];
          }
          store(bias, p.bias_type, (size_t)i, sum);
        }
      }
      free(wa), free(wb);
    }
    /* the epilogue, element by element in column-major order */
    const void *bias = p.bias ? (const char *)dd->bias + (size_t)bi * (size_t)dd->bias_batch_stride * type_bytes(p.bias_type) : NULL;
    char *aux = (p.aux_out || p.dgelu) ? (char *)dd->aux + (size_t)bi * (size_t)dd->aux_batch_stride * type_bytes(p.aux_type) : NULL;
    double *bgrad = p.bgrad ? calloc((size_t)p.m + 1, sizeof *bgrad) : NULL;
    for (int j = 0; j < p.n; j++)
      for (int i = 0; i < p.m; i++) {
        double v = t[i + (size_t)j * (size_t)p.m];
        if (be != 0) v += be * (f64 ? ((const double *)cb)[i + (size_t)j * (size_t)p.c->ld]
                                    : load(cb, p.c->type, i + (size_t)j * (size_t)p.c->ld));
        if (!f64) v = (float)v;
        if (bias) v = (float)(v + load(bias, p.bias_type, (size_t)i));
        size_t ai = aux ? (size_t)i + (size_t)j * (size_t)dd->aux_ld : 0;
        if (p.aux_out) store(aux, p.aux_type, ai, v);
        if (p.gelu) v = gelu(v);
        if (p.relu) v = v > 0 ? v : 0;
        if (p.dgelu) v = (float)v * gelu_grad(load(aux, p.aux_type, ai));
        if (bgrad) bgrad[i] += (float)v;
        if (f64) ((double *)db)[i + (size_t)j * (size_t)p.dl->ld] = v;
        else store(db, p.dl->type, i + (size_t)j * (size_t)p.dl->ld, v);
      }
    if (bgrad) {
      void *bg = (char *)dd->bias + (size_t)bi * (size_t)dd->bias_batch_stride * type_bytes(p.bias_type);
      for (int i = 0; i < p.m; i++) store(bg, p.bias_type, (size_t)i, bgrad[i]);
      free(bgrad);
    }
  }
  free(t), free(tf);
  return CG_CUBLAS_STATUS_SUCCESS;
}

