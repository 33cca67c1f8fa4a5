/* runtime/cpu/kern_matmul.c — a[..., M, K] @ b[..., K, N] -> [..., M, N].
 *
 * Batch dims broadcast numpy-style: the kernel loops over the result's batch
 * index space and computes, per operand, the offset of its M×K / K×N matrix
 * through broadcast strides (0 along broadcast dims). Each matrix product is
 * one rt_sgemm (f32) / rt_dgemm (f64) call (gemm.c: every element is the
 * same fused multiply-add chain over k, however the work is split) — or, for
 * x @ W with W shared by every batch, one product over all rows at once, and
 * for many small products, the batches spread over the threads. bf16/f16
 * operands are widened to f32, multiplied in f32 and rounded back; two bf16
 * operands go as stored to rt_gemm_bf16 where it runs: on AMX tiles by
 * default where the machine has them (bf16 pair products summed in f32 in
 * the tiles' order, denormals flushed: not the widened chain's bits; off
 * with TGC_GEMM_AMX=0), or on vdpbf16ps when asked for with TGC_GEMM_BF16=1
 * (the same f32 chain, denormals flushed); integer
 * operands use a plain loop accumulating in double. Rank-1 operands follow
 * numpy (a[K] is a row, b[K] a column, and that dim is dropped from the
 * result).
 *
 * transpose_a = 1 reads a stored as [..., K, M] (transpose_b = 1: b stored
 * as [..., N, K]) through its last-two-axes transpose, as BLAS does: the
 * product packs either layout into the same panels, so the result is the
 * same, bit for bit, as the product of the transpose written out (what the
 * graph computes without fuse-transpose).
 */
#include <omp.h>
#include <stdlib.h>

#include "kernels.h"

typedef struct {
  int64_t m, k, n;
  int batch_rank;
  int64_t batch_dims[IR_MAX_RANK];
  int64_t a_stride[IR_MAX_RANK], b_stride[IR_MAX_RANK]; /* in matrices */
  int64_t batches;
} mm_shape;

/* ta / tb: the operand is read transposed (its rank is >= 2: ir_infer). */
static void mm_plan(const ir_type *a, const ir_type *b, bool ta, bool tb, mm_shape *s) {
  s->m = ta ? a->dims[a->rank - 1] : a->rank >= 2 ? a->dims[a->rank - 2] : 1;
  s->k = ta ? a->dims[a->rank - 2] : a->rank >= 1 ? a->dims[a->rank - 1] : 1;
  s->n = tb ? b->dims[b->rank - 2] : b->rank >= 2 ? b->dims[b->rank - 1] : 1;
  /* batch shapes: all but the matrix dims */
  ir_type ab = {.dtype = a->dtype, .rank = a->rank > 2 ? a->rank - 2 : 0};
  ir_type bb = {.dtype = b->dtype, .rank = b->rank > 2 ? b->rank - 2 : 0};
  for (int d = 0; d < ab.rank; d++) ab.dims[d] = a->dims[d];
  for (int d = 0; d < bb.rank; d++) bb.dims[d] = b->dims[d];
  int r = ab.rank > bb.rank ? ab.rank : bb.rank;
  s->batch_rank = r;
  s->batches = 1;
  for (int d = 0; d < r; d++) {
    int da = d - (r - ab.rank), db = d - (r - bb.rank);
    int64_t x = da >= 0 ? ab.dims[da] : 1, y = db >= 0 ? bb.dims[db] : 1;
    s->batch_dims[d] = x == 1 ? y : x;
    s->batches *= s->batch_dims[d];
  }
  rt_broadcast_strides(&ab, r, s->batch_dims, s->a_stride);
  rt_broadcast_strides(&bb, r, s->batch_dims, s->b_stride);
}

/* Matrix offsets (in elements) of batch index bi in a and b. */
static void mm_offsets(const mm_shape *s, int64_t bi, int64_t *ao, int64_t *bo) {
  int64_t a = 0, b = 0;
  for (int d = s->batch_rank - 1; d >= 0; d--) {
    int64_t i = bi % s->batch_dims[d];
    bi /= s->batch_dims[d];
    a += i * s->a_stride[d];
    b += i * s->b_stride[d];
  }
  *ao = a * s->m * s->k;
  *bo = b * s->k * s->n;
}

/* b is one matrix shared by every batch and a's matrices lie back to back
 * (a is not broadcast): the batched product is a single [batches*M, K] @
 * [K, N] product: W is packed once, not once per batch. Not for a read
 * transposed: its rows are not those of one [batches*M, K] matrix; b may be
 * (W^T, the one [N, K] matrix read transposed). The elements are the same
 * as those of per-batch products (gemm.c). */
static bool shared_b(const mm_shape *s) {
  int64_t expect = 1;
  for (int d = s->batch_rank - 1; d >= 0; d--) {
    if (s->b_stride[d] != 0 && s->batch_dims[d] != 1) return false;
    if (s->batch_dims[d] != 1 && s->a_stride[d] != expect) return false;
    expect *= s->batch_dims[d];
  }
  return s->batches > 1;
}

static float *widen_to_f32(const rt_tensor *t) {
  int64_t n = rt_numel(&t->type);
  float *p = rt_scratch_push((size_t)(n ? n : 1) * sizeof *p);
  if (!p) return NULL;
  if (t->type.dtype == IR_DT_BF16) /* inline: the loop vectorizes */
    for (int64_t i = 0; i < n; i++) p[i] = rt_bf16_value(((const uint16_t *)t->data)[i]);
  else
    for (int64_t i = 0; i < n; i++) p[i] = (float)rt_load(t->type.dtype, t->data, i);
  return p;
}

/* C (element offset co) = op(A) op(B) in f32 from element offsets ao, bo:
 * bf16 operands with rt_gemm_bf16 when bf (rt_gemm_bf16_round, C bf16,
 * when c16), else f32 ones with rt_sgemm. */
static int mm_f32(bool bf, bool c16, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t ao,
                  int64_t lda, const void *B, int64_t bo, int64_t ldb, void *C, int64_t co, int64_t ldc) {
  const uint16_t *ah = (const uint16_t *)A + ao, *bh = (const uint16_t *)B + bo;
  if (c16) return rt_gemm_bf16_round(ta, tb, M, N, K, ah, lda, bh, ldb, (uint16_t *)C + co, ldc);
  if (bf) return rt_gemm_bf16(ta, tb, M, N, K, ah, lda, bh, ldb, (float *)C + co, ldc);
  return rt_sgemm(ta, tb, M, N, K, (const float *)A + ao, lda, (const float *)B + bo, ldb, (float *)C + co, ldc);
}

static int mm_oom(const rt_kctx *k) {
  rt_kerr(k, "out of memory in matmul %%%s", rt_value_name(k->node->out[0]));
  return -1;
}

/* out = a @ b, a / b read transposed when ta / tb. */
static int matmul_run(const rt_kctx *k, const rt_tensor *a, const rt_tensor *b, bool ta, bool tb) {
  rt_tensor *out = k->out[0];
  mm_shape s;
  mm_plan(&a->type, &b->type, ta, tb, &s);
  int64_t M = s.m, K = s.k, N = s.n;
  /* row-major leading dimensions of the stored matrices */
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  ir_dtype dt = out->type.dtype;
  if (M == 0 || N == 0 || s.batches == 0) return 0;
  if (K == 0) { /* empty sum: zeros (the executor does not zero results) */
    memset(out->data, 0, out->nbytes);
    return 0;
  }
  if (dt == IR_DT_F64 && a->type.dtype == IR_DT_F64 && b->type.dtype == IR_DT_F64) {
    for (int64_t bi = 0; bi < s.batches; bi++) {
      int64_t ao, bo;
      mm_offsets(&s, bi, &ao, &bo);
      if (rt_dgemm(ta, tb, M, N, K, (const double *)a->data + ao, lda, (const double *)b->data + bo, ldb,
                   (double *)out->data + bi * M * N, N) != 0)
        return mm_oom(k);
    }
    return 0;
  }
  if ((dt == IR_DT_F32 || dt == IR_DT_BF16 || dt == IR_DT_F16)) {
    bool native = dt == IR_DT_F32 && a->type.dtype == IR_DT_F32 && b->type.dtype == IR_DT_F32;
    /* bf16 operands: AMX or vdpbf16ps reads them as stored (rt_gemm_bf16), where it runs */
    bool bf = a->type.dtype == IR_DT_BF16 && b->type.dtype == IR_DT_BF16 && rt_gemm_bf16_native();
    /* a bf16 result of AMX products: rounded on the way out of the tiles (rt_gemm_bf16_round: the same bits) */
    const char *kind = bf ? rt_gemm_bf16_kind() : NULL;
    bool c16 = dt == IR_DT_BF16 && kind && strcmp(kind, "amx") == 0 && K <= RT_GEMM_BF16_ROUND_MAX_K;
    size_t mark = rt_scratch_mark(); /* bf16 / f16: the operands widened, the product in f32 */
    const void *af = native || bf ? a->data : widen_to_f32(a);
    const void *bf_ = native || bf ? b->data : widen_to_f32(b);
    void *of = native || c16 ? out->data : rt_scratch_push((size_t)(s.batches * M * N) * sizeof(float));
    if (!af || !bf_ || !of) {
      rt_scratch_pop(mark);
      rt_kerr(k, "out of memory converting operands of matmul %%%s to f32",
              rt_value_name(k->node->out[0]));
      return -1;
    }
    int rc = 0;
    if (!ta && shared_b(&s)) { /* x @ W: one product of all rows */
      rc = mm_f32(bf, c16, false, tb, s.batches * M, N, K, af, 0, K, bf_, 0, ldb, of, 0, N);
    } else if (s.batches >= 2 * omp_get_max_threads() && (double)M * (double)N * (double)K < (1 << 21)) {
      /* many small products: one per thread at a time */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : rc)
      for (int64_t bi = 0; bi < s.batches; bi++) {
        int64_t ao, bo;
        mm_offsets(&s, bi, &ao, &bo);
        rc |= mm_f32(bf, c16, ta, tb, M, N, K, af, ao, lda, bf_, bo, ldb, of, bi * M * N, N);
      }
    } else {
      for (int64_t bi = 0; bi < s.batches && rc == 0; bi++) {
        int64_t ao, bo;
        mm_offsets(&s, bi, &ao, &bo);
        rc = mm_f32(bf, c16, ta, tb, M, N, K, af, ao, lda, bf_, bo, ldb, of, bi * M * N, N);
      }
    }
    if (!native && !c16) {
      int64_t n = s.batches * M * N;
      if (dt == IR_DT_BF16)
        rt_round_to_bf16(out->data, of, n);
      else
        for (int64_t i = 0; i < n; i++) rt_store(dt, out->data, i, ((const float *)of)[i]);
    }
    rt_scratch_pop(mark);
    return rc ? mm_oom(k) : 0;
  }
  /* Integer (or mixed) matmul: plain loop in
   * double, one output element each. */
  int64_t total = s.batches * M * N;
  ir_dtype adt = a->type.dtype, bdt = b->type.dtype;
#pragma omp parallel for schedule(static) if (total * K > RT_PAR_MIN)
  for (int64_t o = 0; o < total; o++) {
    int64_t bi = o / (M * N), i = o / N % M, j = o % N, ao, bo;
    mm_offsets(&s, bi, &ao, &bo);
    double acc = 0;
    /* a(i, kk), b(kk, j) of the stored matrices, transposed or not */
    int64_t ai = ao + (ta ? i : i * K), as = ta ? M : 1, bj = bo + (tb ? j * K : j), bs = tb ? 1 : N;
    for (int64_t kk = 0; kk < K; kk++)
      acc += rt_load(adt, a->data, ai + kk * as) * rt_load(bdt, b->data, bj + kk * bs);
    rt_store(dt, out->data, o, acc);
  }
  return 0;
}

int rt_kern_matmul(const rt_kctx *k) {
  const rt_tensor *a = k->in[0], *b = k->in[1];
  bool ta = k->node && ir_node_attr_int(k->node, "transpose_a", 0) != 0 && a->type.rank >= 2;
  bool tb = k->node && ir_node_attr_int(k->node, "transpose_b", 0) != 0 && b->type.rank >= 2;
  return matmul_run(k, a, b, ta, tb);
}
