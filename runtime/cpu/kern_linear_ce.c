/* runtime/cpu/kern_linear_ce.c — linear_cross_entropy: the LM head and its
 * loss, `chunk` rows of h at a time (ir/ops.def; made by fuse-lm-head).
 *
 * Per chunk of C rows, in the op's chunk buffer (result 4, [C, V]):
 *   logits_c = h_c w^T (w[V, D], transpose_b = 1) or h_c w (w[D, V])
 *   predicted_c = argmax of each row (rt_argmax_line, argmax's own)
 *   loss rows, and softmax - onehot scaled by g / rows, in place (rt_ce_rows;
 *   with g f32 over bf16 / f16 h, mixed precision, rounded to f32 first, as
 *   the unfused graph's cross_entropy_grad in f32 and its cast do)
 *   dh_c = buffer w (or buffer w^T)
 *   dw  = (chunk 0 ? 0 : dw) + buffer^T h_c (or h_c^T buffer), rounded to
 *         dw's dtype after every chunk (what a GPU's C += A B in that dtype does)
 * The loss is the mean of the row losses added in row order. Every product
 * is rt_sgemm / rt_dgemm (bf16 / f16 widened to f32, the product rounded
 * to the dtype as matmul rounds it; bf16 operands read as stored by
 * rt_gemm_bf16 where it runs: AMX tiles by default where the machine has
 * them, vdpbf16ps when asked for, as matmul; on AMX the bf16 logits and a
 * one-chunk bf16 dw come rounded out of the tiles, rt_gemm_bf16_round: the
 * same bits, no f32 copy), so logits, loss and dh are the bits of
 * the unfused graph's matmul, cross_entropy and matmul; dw differs from its
 * one product over every row only by the partial sums of the chunks.
 */
#include "kernels.h"

typedef struct {
  bool f64, native; /* f64: dgemm; native: f32 or f64 operands used as stored */
  bool bf;          /* bf16 operands read as stored by rt_gemm_bf16 (AMX or vdpbf16ps), products in f32 */
  bool c16;         /* bf16 results of AMX products rounded on the way out (rt_gemm_bf16_round) */
  size_t es;        /* bytes per element of the float products (4 or 8) */
  size_t in_es;     /* bytes per element of the operands the products read */
} lce_kind;

/* C[M,N] = op(A) op(B) in the product's precision. */
static int lce_gemm(const lce_kind *t, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, void *C, int64_t ldc) {
  if (t->f64) return rt_dgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  if (t->bf) return rt_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  return rt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

/* n elements of x (dtype dt) as the product's floats: x itself when native. */
static void *lce_widen(const lce_kind *t, ir_dtype dt, const void *x, int64_t n) {
  if (t->native || t->bf) return (void *)x;
  float *p = rt_scratch_push((size_t)(n ? n : 1) * sizeof *p);
  if (p && dt == IR_DT_BF16) /* inline: the loop vectorizes */
    for (int64_t i = 0; i < n; i++) p[i] = rt_bf16_value(((const uint16_t *)x)[i]);
  else
    for (int64_t i = 0; p && i < n; i++) p[i] = (float)rt_load(dt, x, i);
  return p;
}

/* The product's floats p[0..n) rounded into x (dtype dt); nothing when native and p is x. */
static void lce_store(const lce_kind *t, ir_dtype dt, void *x, const void *p, int64_t n) {
  if (t->native && p == x) return;
  if (dt == IR_DT_BF16 && !t->f64) {
    rt_round_to_bf16(x, p, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) rt_store(dt, x, i, t->f64 ? ((const double *)p)[i] : ((const float *)p)[i]);
}

static void lce_argmax(ir_dtype dt, const void *x, int64_t rows, int64_t V, int32_t *out) {
#pragma omp parallel for schedule(static) if (rows * V > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++) out[r] = (int32_t)rt_argmax_line(dt, x, r * V, V, 1);
}

int rt_kern_linear_cross_entropy(const rt_kctx *k) {
  const rt_tensor *h = k->in[0], *w = k->in[1], *tg = k->in[2], *gs = k->in[3];
  rt_tensor *loss = k->out[0], *dh = k->out[1], *dw = k->out[2], *pred = k->out[3], *buf = k->out[4];
  bool tb = ir_node_attr_int(k->node, "transpose_b", 0) != 0;
  ir_dtype dt = h->type.dtype;
  int64_t D = h->type.dims[h->type.rank - 1], V = w->type.dims[tb ? 0 : 1], N = rt_numel(&tg->type);
  int64_t C = buf->type.dims[0];
  int64_t bad, at = rt_first_out_of_range(tg, V, &bad);
  if (at >= 0) {
    rt_kerr(k, "linear_cross_entropy target %lld out of range [0, %lld) in %%%s (element %lld)", (long long)bad,
            (long long)V, rt_value_name(k->node->in[2]), (long long)at);
    return -1;
  }
  lce_kind t = {.f64 = dt == IR_DT_F64, .native = dt == IR_DT_F64 || dt == IR_DT_F32};
  t.bf = dt == IR_DT_BF16 && w->type.dtype == IR_DT_BF16 && rt_gemm_bf16_native();
  const char *kind = t.bf ? rt_gemm_bf16_kind() : NULL;
  t.c16 = kind && strcmp(kind, "amx") == 0;
  t.es = t.f64 ? 8 : 4;
  t.in_es = t.bf ? 2 : t.es;
  size_t mark = rt_scratch_mark();
  double *row_loss = rt_scratch_push((size_t)N * sizeof *row_loss);
  const char *hp = lce_widen(&t, dt, h->data, N * D), *wp = lce_widen(&t, dt, w->data, V * D);
  char *lp = t.native ? buf->data : rt_scratch_push((size_t)(C * V) * t.es); /* logits, then their gradient */
  char *dhp = t.native ? dh->data : rt_scratch_push((size_t)(C * D) * t.es);
  /* this chunk's dw: the first chunk's product goes straight into dw when dw holds the product's floats */
  bool dw_native = t.native && dw->type.dtype == dt;
  /* one chunk of AMX products: dw rounded to bf16 on the way out of the tiles (the same bits), no f32 part */
  bool dw16 = t.c16 && N <= C && dw->type.dtype == IR_DT_BF16 && N <= RT_GEMM_BF16_ROUND_MAX_K;
  char *part = (dw_native || dw16) && N <= C ? dw->data : rt_scratch_push((size_t)(V * D) * t.es);
  int rc = row_loss && hp && wp && lp && dhp && part ? 0 : -1;
  double scale = rt_load(gs->type.dtype, gs->data, 0) / (double)N;
  for (int64_t r0 = 0; r0 < N && rc == 0; r0 += C) {
    int64_t c = N - r0 < C ? N - r0 : C;
    const char *hc = hp + (size_t)(r0 * D) * t.in_es;
    if (t.c16 && D <= RT_GEMM_BF16_ROUND_MAX_K) { /* the logits rounded on the way out of the tiles: the same bits */
      rc |= rt_gemm_bf16_round(false, tb, c, V, D, (const uint16_t *)hc, D, (const uint16_t *)wp, tb ? D : V,
                               buf->data, V);
    } else {
      rc |= lce_gemm(&t, false, tb, c, V, D, hc, D, wp, tb ? D : V, lp, V);
      lce_store(&t, dt, buf->data, lp, c * V);
    }
    lce_argmax(dt, buf->data, c, V, (int32_t *)pred->data + r0);
    ir_type lt = {.dtype = dt, .rank = 2, .dims = {c, V}}, tt = {.dtype = tg->type.dtype, .rank = 1, .dims = {c}};
    rt_tensor lv = {.type = lt, .data = buf->data, .nbytes = (size_t)(c * V) * ir_dtype_size(dt)};
    rt_tensor tv = {.type = tt, .data = (char *)tg->data + (size_t)r0 * ir_dtype_size(tt.dtype)};
    if (gs->type.dtype == dt || t.native) {
      rc |= rt_ce_rows(&lv, &tv, row_loss + r0, &lv, scale);
    } else { /* mixed precision: the gradient in f32 (lp), then rounded into the buffer */
      rt_tensor gv = {.type = lt, .data = lp, .nbytes = (size_t)(c * V) * sizeof(float)};
      gv.type.dtype = IR_DT_F32;
      rc |= rt_ce_rows(&lv, &tv, row_loss + r0, &gv, scale);
      lce_store(&t, dt, buf->data, lp, c * V);
    }
    if (!t.native && !t.bf)
      for (int64_t i = 0; i < c * V; i++) ((float *)lp)[i] = (float)rt_load(dt, buf->data, i);
    const char *gp = t.bf ? buf->data : lp; /* the logits' gradient as the products read it */
    /* dh rows = dlogits w (w^T); dw part = dlogits^T h_c (h_c^T dlogits) */
    char *dhc = t.native ? dhp + (size_t)(r0 * D) * t.es : dhp;
    rc |= lce_gemm(&t, false, !tb, c, D, V, gp, V, wp, tb ? D : V, dhc, D);
    lce_store(&t, dt, (char *)dh->data + (size_t)(r0 * D) * ir_dtype_size(dt), dhc, c * D);
    if (dw16) {
      rc |= tb ? rt_gemm_bf16_round(true, false, V, D, c, (const uint16_t *)gp, V, (const uint16_t *)hc, D, dw->data, D)
               : rt_gemm_bf16_round(true, false, D, V, c, (const uint16_t *)hc, D, (const uint16_t *)gp, V, dw->data, V);
      continue;
    }
    char *into = dw_native && r0 == 0 ? dw->data : part;
    if (tb) rc |= lce_gemm(&t, true, false, V, D, c, gp, V, hc, D, into, D);
    else rc |= lce_gemm(&t, true, false, D, V, c, hc, D, gp, V, into, V);
    if (into == dw->data || rc != 0) continue;
    /* dw (+)= part, rounded to dw's dtype: a sum of two floats in double rounds to the float sum */
    if (r0 == 0 && !t.f64 && dw->type.dtype == IR_DT_BF16) { /* the first chunk's floats, rounded (kernels.h) */
      lce_store(&t, IR_DT_BF16, dw->data, part, V * D);
      continue;
    }
#pragma omp parallel for schedule(static) if (V * D > RT_PAR_MIN)
    for (int64_t i = 0; i < V * D; i++) {
      double p = t.f64 ? ((double *)part)[i] : ((float *)part)[i];
      rt_store(dw->type.dtype, dw->data, i, r0 == 0 ? p : rt_load(dw->type.dtype, dw->data, i) + p);
    }
  }
  double total = 0;
  for (int64_t p = 0; rc == 0 && p < N; p++) total += row_loss[p];
  rt_scratch_pop(mark);
  if (rc != 0) {
    rt_kerr(k, "out of memory in linear_cross_entropy %%%s", rt_value_name(k->node->out[0]));
    return -1;
  }
  rt_store(loss->type.dtype, loss->data, 0, total / (double)N);
  return 0;
}
