/* runtime/cpu/kern_attention.c — the fused attention kernels (FlashAttention-2
 * style) for the ATTENTION and ATTENTION_GRAD ops the fuse-attention pass
 * makes.
 *
 *   attention(q[..,T,E], k[..,S,E], v[..,S,F] [, qpos]) {scale, causal} -> (o[..,T,F], lse[..,T])
 *     s_ij = scale * q_i . k_j, masked (-inf) where j > i + off if causal,
 *     off = S - T, or qpos[0] when given (a decode step: q's rows are the
 *     positions qpos[0].. of a KV cache k, v of S rows, the later rows unread);
 *     grouped-query (k, v with Hkv of q's Hq heads on the dim before T):
 *     query head h reads kv head h / (Hq / Hkv) in place, no copy
 *     o_i = sum_j softmax(s_i)_j v_j,  lse_i = log sum_j exp(s_ij)
 *   attention_grad(q, k, v, o, lse, do) -> (dq, dk, dv)
 *     grouped-query too: k, v (and dk, dv) hold the Hkv shared heads; dk
 *     and dv of kv head g sum the contributions of query heads
 *     g * G .. g * G + G - 1 (G = Hq / Hkv) in that order
 *
 * Forward: the work is split into tasks of (batch element, block of ATT_BR
 * query rows), run with OpenMP. A task walks the keys in blocks of ATT_BC
 * (skipping blocks wholly above the causal diagonal) keeping per row the
 * running maximum m and sum l of the online softmax; the output row is the
 * accumulator, rescaled by exp(m_old - m_new) when the maximum grows. Extra
 * memory per task: one K block transposed (E x ATT_BC), one score row block
 * and m, l for its rows — never the T x S scores.
 *
 * Backward: recomputes the probabilities from q, k and the saved lse:
 *   p_ij = exp(s_ij - lse_i);  D_i = rowsum(do_i * o_i);
 *   dv_j += p_ij do_i;  dp_ij = do_i . v_j;  ds_ij = p_ij (dp_ij - D_i);
 *   dq_i += scale ds_ij k_j;  dk_j += scale ds_ij q_i.
 * One task per kv head (a thread owns its dk and dv rows and the dq rows
 * of the query heads that read them, so nothing races): the task walks its
 * query heads in order (one without grouped-query), for each the key
 * blocks outermost and query rows inside, so the summation order is fixed:
 * results do not depend on OMP_NUM_THREADS.
 *
 * Precision: unlike the reference kernels (which compute in double through
 * rt_load/rt_store) these work in the storage type — f64 in double (libm
 * exp), f32 in float (like the sgemm the unfused graph uses; exp by a
 * vectorizable polynomial, att_expf, about 2e-7 relative); bf16/f16 operands are
 * widened to float buffers and the results rounded back; lse is f32 (f64 for
 * f64 operands). A row that sees no key at all (causal with T > S) gets NaN
 * outputs and lse -inf, as softmax of an all -inf row does in the unfused
 * graph. Inner loops carry no reductions (each accumulator is summed in the
 * loop order), so `omp simd` vectorizes them without reordering sums.
 *
 * The `heads` layout (q[..,T,H,E] ..., made by fuse-transpose so that the
 * cuda kernels read and write the heads in place): the operands in that
 * layout are copied to [..,H,T,E] order, the kernels above run, and the
 * results are copied back (att_heads_run): the same arithmetic in the same
 * order, so the results are bit for bit those of the graph with the
 * transposes.
 *
 * The two element types share one template: this file includes itself once
 * with ATT_REAL = float and once with ATT_REAL = double (the part between
 * `#ifdef ATT_REAL` and `#else` below).
 */
#ifdef ATT_REAL /* ---- the template: instantiated for float and double ---- */

#define ATT_CAT2(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT2(a, b)
#define ATT_FN(name) ATT_CAT(name, ATT_SUF)

/* acc[0..n) += sum_c w[c] * rows[c * stride + 0..n), c = 0..nc-1, each
 * element summed in c order; chunks of the row stay in registers across c
 * (so the sum is not a chain through memory). */
static inline __attribute__((always_inline)) void ATT_FN(att_axpy_chunk)(ATT_REAL *restrict acc, const ATT_REAL *restrict w,
                                                                         int64_t nc, const ATT_REAL *restrict rows,
                                                                         int64_t stride, const int width) {
  ATT_REAL a[16];
  for (int k = 0; k < width; k++) a[k] = acc[k];
  for (int64_t c = 0; c < nc; c++) {
    const ATT_REAL wc = w[c], *r = rows + c * stride;
    for (int k = 0; k < width; k++) a[k] += wc * r[k];
  }
  for (int k = 0; k < width; k++) acc[k] = a[k];
}

static void ATT_FN(att_axpy_rows)(ATT_REAL *restrict acc, int64_t n, const ATT_REAL *restrict w, int64_t nc,
                                  const ATT_REAL *restrict rows, int64_t stride) {
  int64_t f = 0;
  for (; f + 16 <= n; f += 16) ATT_FN(att_axpy_chunk)(acc + f, w, nc, rows + f, stride, 16);
  if (f + 8 <= n) ATT_FN(att_axpy_chunk)(acc + f, w, nc, rows + f, stride, 8), f += 8;
  if (f + 4 <= n) ATT_FN(att_axpy_chunk)(acc + f, w, nc, rows + f, stride, 4), f += 4;
  for (; f < n; f++) ATT_FN(att_axpy_chunk)(acc + f, w, nc, rows + f, stride, 1);
}

/* q, k, v, o: BH batch elements of T x E, S x E, S x F, T x F; lse BH x T.
 * o must be zeroed. Returns -1 if scratch memory ran out. */
static int ATT_FN(att_forward)(const ATT_REAL *restrict q, const ATT_REAL *restrict k, const ATT_REAL *restrict v,
                               ATT_REAL *restrict o, ATT_REAL *restrict lse, const att_dims *d) {
  const int64_t T = d->t, S = d->s, E = d->e, F = d->f, off = d->off;
  const int64_t nqb = (T + ATT_BR - 1) / ATT_BR, tasks = d->bh * nqb;
  const ATT_REAL scale = (ATT_REAL)d->scale;
  int failed = 0;
#pragma omp parallel if (tasks > 1 && d->bh * T * S * (E + F) > RT_PAR_MIN)
  {
    size_t mark = rt_scratch_mark();
    ATT_REAL *kt = rt_scratch_push((size_t)(E > 0 ? E : 1) * ATT_BC * sizeof *kt);
    ATT_REAL *sc = rt_scratch_push((size_t)ATT_BC * sizeof *sc);
    ATT_REAL *m = rt_scratch_push((size_t)ATT_BR * sizeof *m), *l = rt_scratch_push((size_t)ATT_BR * sizeof *l);
    bool ok = kt && sc && m && l;
    if (!ok) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; task++) {
      if (!ok) continue;
      int64_t bh = task / nqb, i0 = (task % nqb) * ATT_BR, i1 = i0 + ATT_BR < T ? i0 + ATT_BR : T;
      const int64_t kvh = bh / d->group; /* grouped-query: the kv head query head bh reads */
      const ATT_REAL *qb = q + bh * T * E, *kb = k + kvh * S * E, *vb = v + kvh * S * F;
      ATT_REAL *ob = o + bh * T * F, *lb = lse + bh * T;
      for (int64_t r = 0; r < i1 - i0; r++) m[r] = -INFINITY, l[r] = 0;
      int64_t jend = d->causal ? (i1 + off < S ? i1 + off : S) : S; /* keys any row of the block sees */
      for (int64_t j0 = 0; j0 < jend; j0 += ATT_BC) {
        int64_t j1 = j0 + ATT_BC < jend ? j0 + ATT_BC : jend;
        for (int64_t j = j0; j < j1; j++) /* K block transposed: kt[e][c] */
          for (int64_t e = 0; e < E; e++) kt[e * ATT_BC + (j - j0)] = kb[j * E + e];
        for (int64_t i = i0; i < i1; i++) {
          int64_t r = i - i0, lim = d->causal && i + off + 1 < j1 ? i + off + 1 : j1, nc = lim - j0;
          if (nc <= 0) continue;
          const ATT_REAL *qi = qb + i * E;
          for (int64_t c = 0; c < nc; c++) sc[c] = 0;
          for (int64_t e = 0; e < E; e++) {
            const ATT_REAL qe = qi[e], *kte = kt + e * ATT_BC;
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) sc[c] += qe * kte[c];
          }
          ATT_REAL mx = -INFINITY; /* NaN scores are skipped here but reach l through exp */
#pragma omp simd reduction(max : mx)
          for (int64_t c = 0; c < nc; c++) {
            sc[c] *= scale;
            mx = sc[c] > mx ? sc[c] : mx;
          }
          ATT_REAL mnew = m[r] > mx || m[r] != m[r] ? m[r] : mx;
          if (mnew == -INFINITY) { /* every score -inf so far: nothing to add, unless one is NaN */
            for (int64_t c = 0; c < nc; c++)
              if (sc[c] != sc[c]) l[r] = (ATT_REAL)NAN;
            continue;
          }
          ATT_REAL corr = ATT_EXP(m[r] - mnew), sum = 0;
#pragma omp simd
          for (int64_t c = 0; c < nc; c++) sc[c] = ATT_EXP(sc[c] - mnew);
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < nc; c++) sum += sc[c]; /* vector partial sums: a fixed order all the same */
          l[r] = l[r] * corr + sum;
          m[r] = mnew;
          ATT_REAL *oi = ob + i * F;
          if (corr != 1)
            for (int64_t f = 0; f < F; f++) oi[f] *= corr;
          ATT_FN(att_axpy_rows)(oi, F, sc, nc, vb + j0 * F, F);
        }
      }
      for (int64_t i = i0; i < i1; i++) {
        int64_t r = i - i0;
        ATT_REAL *oi = ob + i * F;
        if (l[r] > 0) {
          ATT_REAL inv = 1 / l[r];
          for (int64_t f = 0; f < F; f++) oi[f] *= inv;
          lb[i] = m[r] + ATT_LOG(l[r]);
        } else { /* no key visible (or NaN scores): softmax of nothing */
          for (int64_t f = 0; f < F; f++) oi[f] = (ATT_REAL)NAN;
          lb[i] = l[r] == l[r] && m[r] == -INFINITY ? -INFINITY : (ATT_REAL)NAN;
        }
      }
    }
    rt_scratch_pop(mark);
  }
  return failed ? -1 : 0;
}

/* dq, dk, dv must be zeroed. Returns -1 if scratch memory ran out. */
static int ATT_FN(att_backward)(const ATT_REAL *restrict q, const ATT_REAL *restrict k, const ATT_REAL *restrict v,
                                const ATT_REAL *restrict o, const ATT_REAL *restrict lse,
                                const ATT_REAL *restrict dout, ATT_REAL *restrict dq, ATT_REAL *restrict dk,
                                ATT_REAL *restrict dv, const att_dims *d) {
  const int64_t T = d->t, S = d->s, E = d->e, F = d->f, off = S - T, nkv = d->bh / d->group;
  const ATT_REAL scale = (ATT_REAL)d->scale;
  int failed = 0;
#pragma omp parallel if (nkv > 1 && d->bh * T * S * (E + F) > RT_PAR_MIN)
  {
    size_t mark = rt_scratch_mark();
    ATT_REAL *kt = rt_scratch_push((size_t)(E > 0 ? E : 1) * ATT_BC * sizeof *kt);
    ATT_REAL *vt = rt_scratch_push((size_t)(F > 0 ? F : 1) * ATT_BC * sizeof *vt);
    ATT_REAL *p = rt_scratch_push((size_t)ATT_BC * sizeof *p), *dp = rt_scratch_push((size_t)ATT_BC * sizeof *dp);
    ATT_REAL *drow = rt_scratch_push((size_t)(T > 0 ? T : 1) * sizeof *drow);
    bool ok = kt && vt && p && dp && drow;
    if (!ok) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic)
    for (int64_t kvh = 0; kvh < nkv; kvh++) {
      for (int64_t bh = kvh * d->group; ok && bh < (kvh + 1) * d->group; bh++) { /* its query heads, in order */
        const ATT_REAL *qb = q + bh * T * E, *kb = k + kvh * S * E, *vb = v + kvh * S * F;
        const ATT_REAL *ob = o + bh * T * F, *lb = lse + bh * T, *gb = dout + bh * T * F;
        ATT_REAL *dqb = dq + bh * T * E, *dkb = dk + kvh * S * E, *dvb = dv + kvh * S * F;
        for (int64_t i = 0; i < T; i++) { /* D_i = rowsum(do_i * o_i) */
          ATT_REAL s = 0;
          for (int64_t f = 0; f < F; f++) s += gb[i * F + f] * ob[i * F + f];
          drow[i] = s;
        }
        for (int64_t j0 = 0; j0 < S; j0 += ATT_BC) {
          int64_t j1 = j0 + ATT_BC < S ? j0 + ATT_BC : S;
          for (int64_t j = j0; j < j1; j++) {
            for (int64_t e = 0; e < E; e++) kt[e * ATT_BC + (j - j0)] = kb[j * E + e];
            for (int64_t f = 0; f < F; f++) vt[f * ATT_BC + (j - j0)] = vb[j * F + f];
          }
          int64_t istart = d->causal && j0 - off > 0 ? j0 - off : 0; /* first row that sees key j0 */
          for (int64_t i = istart; i < T; i++) {
            int64_t lim = d->causal && i + off + 1 < j1 ? i + off + 1 : j1, nc = lim - j0;
            if (nc <= 0) continue;
            const ATT_REAL *qi = qb + i * E, *gi = gb + i * F, li = lb[i], di = drow[i];
            for (int64_t c = 0; c < nc; c++) p[c] = 0, dp[c] = 0;
            for (int64_t e = 0; e < E; e++) {
              const ATT_REAL qe = qi[e], *kte = kt + e * ATT_BC;
#pragma omp simd
              for (int64_t c = 0; c < nc; c++) p[c] += qe * kte[c];
            }
            for (int64_t f = 0; f < F; f++) {
              const ATT_REAL ge = gi[f], *vtf = vt + f * ATT_BC;
#pragma omp simd
              for (int64_t c = 0; c < nc; c++) dp[c] += ge * vtf[c];
            }
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) {
              p[c] = ATT_EXP(p[c] * scale - li);
              dp[c] = scale * (p[c] * (dp[c] - di)); /* scale * ds */
            }
            for (int64_t c = 0; c < nc; c++) {
              const ATT_REAL pc = p[c], dsc = dp[c];
              ATT_REAL *dvj = dvb + (j0 + c) * F, *dkj = dkb + (j0 + c) * E;
#pragma omp simd
              for (int64_t f = 0; f < F; f++) dvj[f] += pc * gi[f];
#pragma omp simd
              for (int64_t e = 0; e < E; e++) dkj[e] += dsc * qi[e];
            }
            ATT_FN(att_axpy_rows)(dqb + i * E, E, dp, nc, kb + j0 * E, E); /* dq_i += sum_c scale ds_c k_c */
          }
        }
      }
    }
    rt_scratch_pop(mark);
  }
  return failed ? -1 : 0;
}

#undef ATT_CAT2
#undef ATT_CAT
#undef ATT_FN

#else /* ---- the kernels ---- */

#include <stdlib.h>

#include "kernels.h"

enum { ATT_BR = 32, ATT_BC = 64 }; /* query rows per forward task, keys per block */

typedef struct {
  int64_t bh, t, s, e, f; /* batch elements (product of the batch dims), T, S, E, F */
  int64_t off;            /* row i sees keys j <= i + off when causal: S - T, or qpos[0] (attention's 4th operand) */
  int64_t group;          /* query heads per kv head (grouped-query attention: k, v have bh / group heads); 1 */
  double scale;
  bool causal;
} att_dims;

/* exp for float rows, vectorizable (no libm call): exp(x) = 2^n exp(r) with
 * n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts), exp(r) by the
 * Cephes expf polynomial: relative error below 1e-7 on [-87, 88]; below -87
 * it gives 0, above 88 inf (the kernels only take exp of values <= 0), NaN
 * stays NaN. Selections are bit masks (att_sel): a `?:` on a float
 * comparison is not if-converted under -ftrapping-math, so it would keep
 * the loop from vectorizing. */
static inline float att_sel(int cond, float a, float b) { /* cond ? a : b, cond 0 or 1 */
  int32_t m = -cond, ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  int32_t r = (ia & m) | (ib & ~m);
  float f;
  memcpy(&f, &r, sizeof f);
  return f;
}

static inline float att_expf(float x) {
  float xc = att_sel(x < -87.0f, -87.0f, x);
  xc = att_sel(xc > 88.0f, 88.0f, xc);
  xc = att_sel(x != x, 0.0f, xc); /* NaN: any finite value here (the result is x), so n stays in range */
  float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
  float r = xc - fn * 0.693359375f - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23; /* 2^n, n in [-126, 127] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float y = att_sel(x < -87.0f, 0.0f, p * scale);
  y = att_sel(x > 88.0f, INFINITY, y);
  return att_sel(x != x, x, y);
}

#define ATT_REAL float
#define ATT_SUF f32
#define ATT_EXP att_expf
#define ATT_LOG logf
#include "kern_attention.c"
#undef ATT_REAL
#undef ATT_SUF
#undef ATT_EXP
#undef ATT_LOG

#define ATT_REAL double
#define ATT_SUF f64
#define ATT_EXP exp
#define ATT_LOG log
#include "kern_attention.c"
#undef ATT_REAL
#undef ATT_SUF
#undef ATT_EXP
#undef ATT_LOG

/* Grouped-query: an attention or attention_grad (not in the heads layout)
 * whose k has fewer heads (the dim before S) than q. */
static bool att_gqa(const rt_kctx *k) {
  const ir_type *q = &k->in[0]->type, *kk = &k->in[1]->type;
  int r = q->rank;
  return !ir_node_attr(k->node, "heads") && r >= 3 && kk->rank == r &&
         kk->dims[r - 3] > 0 && kk->dims[r - 3] != q->dims[r - 3] && q->dims[r - 3] % kk->dims[r - 3] == 0;
}

/* Reads the dims from the q, k, v tensors (verified types) and the node's attributes. */
static att_dims att_dims_of(const rt_kctx *k) {
  const ir_type *q = &k->in[0]->type, *kk = &k->in[1]->type, *v = &k->in[2]->type;
  att_dims d = {.bh = 1};
  int r = q->rank;
  for (int i = 0; i < r - 2; i++) d.bh *= q->dims[i];
  d.t = q->dims[r - 2];
  d.e = q->dims[r - 1];
  d.s = kk->dims[r - 2];
  d.f = v->dims[r - 1];
  d.scale = ir_node_attr_float(k->node, "scale", 1.0);
  d.causal = ir_node_attr_int(k->node, "causal", 0) != 0;
  d.off = d.s - d.t;
  d.group = att_gqa(k) ? q->dims[r - 3] / kk->dims[r - 3] : 1;
  if (k->node->op == IR_OP_ATTENTION && k->node->n_in == 4) d.off = *(const int32_t *)k->in[3]->data;
  return d;
}

/* The operand and result types the kernels index by (the verifier's rule,
 * checked again so a kernel never reads out of bounds on an unverified graph). */
static bool att_shapes_ok(const rt_kctx *k, int n_in) {
  const ir_type *q = &k->in[0]->type, *kk = &k->in[1]->type, *v = &k->in[2]->type;
  int r = q->rank;
  if (r < 2 || kk->rank != r || v->rank != r || kk->dtype != q->dtype || v->dtype != q->dtype) return false;
  bool ok = q->dims[r - 1] == kk->dims[r - 1] && kk->dims[r - 2] == v->dims[r - 2], gqa = att_gqa(k);
  for (int i = 0; ok && i < r - 2; i++)
    ok = gqa && i == r - 3 ? v->dims[i] == kk->dims[i] : q->dims[i] == kk->dims[i] && q->dims[i] == v->dims[i];
  if (!ok) return false;
  ir_type o = *q, lse = *q;
  o.dims[r - 1] = v->dims[r - 1];
  lse.rank = r - 1;
  lse.dtype = q->dtype == IR_DT_F64 ? IR_DT_F64 : IR_DT_F32;
  if (n_in == 3) return ir_type_equal(&k->out[0]->type, &o) && ir_type_equal(&k->out[1]->type, &lse);
  return ir_type_equal(&k->in[3]->type, &o) && ir_type_equal(&k->in[4]->type, &lse) &&
         ir_type_equal(&k->in[5]->type, &o) && ir_type_equal(&k->out[0]->type, q) &&
         ir_type_equal(&k->out[1]->type, kk) && ir_type_equal(&k->out[2]->type, v);
}

/* A float copy of t (bf16/f16 widened), on the scratch stack; NULL when out of memory. */
static float *att_widen(const rt_tensor *t) {
  int64_t n = rt_numel(&t->type);
  float *p = rt_scratch_push((size_t)(n > 0 ? n : 1) * sizeof *p);
  if (!p) return NULL;
  for (int64_t i = 0; i < n; i++) p[i] = (float)rt_load(t->type.dtype, t->data, i);
  return p;
}

static float *att_zeros(const rt_tensor *t) {
  int64_t n = rt_numel(&t->type);
  float *p = rt_scratch_push((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (p) memset(p, 0, (size_t)(n > 0 ? n : 1) * sizeof(float));
  return p;
}

static void att_narrow(rt_tensor *t, const float *p) {
  int64_t n = rt_numel(&t->type);
  for (int64_t i = 0; i < n; i++) rt_store(t->type.dtype, t->data, i, p[i]);
}

/* dst[p][b][a][c] = src[p][a][b][c] (elements of es bytes). */
static void att_swap(unsigned char *dst, const unsigned char *src, int64_t p, int64_t na, int64_t nb, int64_t c,
                     size_t es) {
  size_t row = (size_t)c * es;
  for (int64_t i = 0; i < p; i++)
    for (int64_t a = 0; a < na; a++)
      for (int64_t b = 0; b < nb; b++)
        memcpy(dst + (size_t)(((i * nb + b) * na + a)) * row, src + (size_t)(((i * na + a) * nb + b)) * row, row);
}

/* A [..., X, Y, C] tensor's type with X and Y swapped. */
static ir_type att_swapped(const ir_type *t) {
  ir_type u = *t;
  if (u.rank >= 3) u.dims[u.rank - 3] = t->dims[t->rank - 2], u.dims[u.rank - 2] = t->dims[t->rank - 3];
  return u;
}

static void att_swap_tensor(rt_tensor *dst, const rt_tensor *src) {
  const ir_type *t = &src->type;
  int64_t p = 1;
  for (int i = 0; i < t->rank - 3; i++) p *= t->dims[i];
  att_swap(dst->data, src->data, p, t->dims[t->rank - 3], t->dims[t->rank - 2], t->dims[t->rank - 1],
           ir_dtype_size(t->dtype));
}

/* Runs fn on k with the operands and results in the heads layout (mask:
 * bit i of in_mask / out_mask) as [..,H,T,C] copies on the scratch stack
 * (no heap allocation in the steady state); -1 out of memory or fn's
 * failure. */
static int att_heads_run(const rt_kctx *k, unsigned in_mask, unsigned out_mask, int (*fn)(const rt_kctx *)) {
  const ir_node *n = k->node;
  rt_tensor tin[6], tout[3];
  const rt_tensor *in[6];
  rt_tensor *out[3];
  size_t mark = rt_scratch_mark();
  bool ok = n->n_in <= 6 && n->n_out <= 3;
  for (int i = 0; ok && i < n->n_in + n->n_out; i++) {
    bool is_in = i < n->n_in;
    int j = is_in ? i : i - n->n_in;
    const rt_tensor *t = is_in ? k->in[j] : k->out[j];
    if (is_in) in[j] = t;
    else out[j] = k->out[j];
    if (!((is_in ? in_mask : out_mask) >> j & 1)) continue;
    rt_tensor *c = is_in ? &tin[j] : &tout[j];
    *c = (rt_tensor){.type = att_swapped(&t->type), .nbytes = t->nbytes};
    if (!(c->data = rt_scratch_push(t->nbytes ? t->nbytes : 1))) {
      ok = false;
      break;
    }
    if (is_in) att_swap_tensor(c, t), in[j] = c;
    else memset(c->data, 0, t->nbytes), out[j] = c; /* zero-filled, as the executor gives results */
  }
  rt_kctx inner = {.node = n, .in = in, .out = out, .err = k->err, .errlen = k->errlen};
  int rc = ok ? fn(&inner) : -1;
  if (!ok) rt_kerr(k, "%s %%%s: out of memory", ir_op_name(n->op), rt_value_name(n->out[0]));
  for (int i = 0; rc == 0 && i < n->n_out; i++)
    if (out_mask >> i & 1) att_swap_tensor(k->out[i], out[i]);
  rt_scratch_pop(mark);
  return rc;
}

static int att_forward_kernel(const rt_kctx *k);
static int att_backward_kernel(const rt_kctx *k);

int rt_kern_attention(const rt_kctx *k) {
  if (ir_node_attr_int(k->node, "heads", 0) > 0) return att_heads_run(k, 0x7, 0x1, att_forward_kernel);
  return att_forward_kernel(k);
}

int rt_kern_attention_grad(const rt_kctx *k) {
  if (ir_node_attr_int(k->node, "heads", 0) > 0) return att_heads_run(k, 0x2f, 0x7, att_backward_kernel);
  return att_backward_kernel(k);
}

static int att_forward_kernel(const rt_kctx *k) {
  if (!att_shapes_ok(k, 3)) {
    rt_kerr(k, "attention %%%s: operands do not have the shapes q[...,T,E], k[...,S,E], v[...,S,F]",
            rt_value_name(k->node->out[0]));
    return -1;
  }
  att_dims d = att_dims_of(k);
  if (d.bh == 0 || d.t == 0) return 0;
  ir_dtype dt = k->in[0]->type.dtype;
  rt_tensor *o = k->out[0], *lse = k->out[1];
  int rc;
  if (dt == IR_DT_F64) {
    rc = att_forward_f64(k->in[0]->data, k->in[1]->data, k->in[2]->data, o->data, lse->data, &d);
  } else if (dt == IR_DT_F32) {
    rc = att_forward_f32(k->in[0]->data, k->in[1]->data, k->in[2]->data, o->data, lse->data, &d);
  } else {
    size_t mark = rt_scratch_mark();
    float *q = att_widen(k->in[0]), *kk = att_widen(k->in[1]), *v = att_widen(k->in[2]), *of = att_zeros(o);
    rc = q && kk && v && of ? att_forward_f32(q, kk, v, of, lse->data, &d) : -1;
    if (rc == 0) att_narrow(o, of);
    rt_scratch_pop(mark);
  }
  if (rc != 0) rt_kerr(k, "attention %%%s: out of memory", rt_value_name(k->node->out[0]));
  return rc;
}

static int att_backward_kernel(const rt_kctx *k) {
  if (!att_shapes_ok(k, 6)) {
    rt_kerr(k, "attention_grad %%%s: operands do not have the types attention gives",
            rt_value_name(k->node->out[0]));
    return -1;
  }
  att_dims d = att_dims_of(k);
  if (d.bh == 0 || d.t == 0 || d.s == 0) return 0;
  ir_dtype dt = k->in[0]->type.dtype;
  const void *lse = k->in[4]->data;
  int rc;
  if (dt == IR_DT_F64) {
    rc = att_backward_f64(k->in[0]->data, k->in[1]->data, k->in[2]->data, k->in[3]->data, lse, k->in[5]->data,
                          k->out[0]->data, k->out[1]->data, k->out[2]->data, &d);
  } else if (dt == IR_DT_F32) {
    rc = att_backward_f32(k->in[0]->data, k->in[1]->data, k->in[2]->data, k->in[3]->data, lse, k->in[5]->data,
                          k->out[0]->data, k->out[1]->data, k->out[2]->data, &d);
  } else {
    size_t mark = rt_scratch_mark();
    float *w[5] = {NULL}, *g[3] = {NULL};
    bool ok = true;
    for (int i = 0; i < 5; i++) ok &= (w[i] = att_widen(k->in[i == 4 ? 5 : i])) != NULL;
    for (int i = 0; i < 3; i++) ok &= (g[i] = att_zeros(k->out[i])) != NULL;
    rc = ok ? att_backward_f32(w[0], w[1], w[2], w[3], lse, w[4], g[0], g[1], g[2], &d) : -1;
    if (rc == 0)
      for (int i = 0; i < 3; i++) att_narrow(k->out[i], g[i]);
    rt_scratch_pop(mark);
  }
  if (rc != 0) rt_kerr(k, "attention_grad %%%s: out of memory", rt_value_name(k->node->out[0]));
  return rc;
}

#endif
