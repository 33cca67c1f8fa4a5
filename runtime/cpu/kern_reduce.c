/* runtime/cpu/kern_reduce.c — reductions and normalizations: reduce_sum,
 * reduce_mean, reduce_max, softmax, log_softmax, layernorm, rmsnorm, and
 * the norms' backward (layernorm_grad, rmsnorm_grad), and the multi-tensor
 * count_nonfinite and sum_squares.
 *
 * Determinism: every result element (or row) is computed by one thread,
 * accumulating sequentially in double in row-major order of the reduced
 * index space. Threads only split the set of result elements, so the
 * result is the same for any OMP_NUM_THREADS and run to run.
 */
#include <omp.h>

#include "kernels.h"
#include "scalar.h" /* ir_s_square: sum_squares squares as the square op does */

static void row_major_strides(const ir_type *t, int64_t *s) {
  int64_t acc = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    s[d] = acc;
    acc *= t->dims[d];
  }
}

/* Fast paths for f32/f64/bf16 whose reduced dims (ignoring size-1 dims) all come
 * before the kept ones ("leading": x viewed as [R, O], e.g. a weight
 * gradient summed over the batch) or all after them ("trailing": [O, R],
 * e.g. a row mean). Each result element still accumulates in double from
 * 0, over r = 0..R-1 in order: the same additions in the same order as the
 * general loop below, so the same bits; leading reductions run across a
 * block of results at once (vectorized over o, one pass over memory). */
enum { REDUCE_BLOCK = 256 };

static inline double reduce_step(ir_op op, double acc, double x) {
  if (op == IR_OP_REDUCE_MAX) return (x > acc || x != x) ? x : acc;
  return acc + x;
}

static bool reduce_fast(const rt_kctx *k, const bool *reduced) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  ir_op op = k->node->op;
  ir_dtype dt = a->type.dtype;
  if ((dt != IR_DT_F32 && dt != IR_DT_F64 && dt != IR_DT_BF16) || out->type.dtype != dt) return false;
  int last_kept = -1, first_kept = a->type.rank, last_red = -1, first_red = a->type.rank;
  int64_t R = 1, O = 1;
  for (int d = 0; d < a->type.rank; d++) {
    if (a->type.dims[d] == 1) continue;
    if (reduced[d]) {
      R *= a->type.dims[d];
      if (d < first_red) first_red = d;
      last_red = d;
    } else {
      O *= a->type.dims[d];
      if (d < first_kept) first_kept = d;
      last_kept = d;
    }
  }
  bool leading = last_red < first_kept, trailing = last_kept < first_red;
  if (!leading && !trailing) return false;
  double init = op == IR_OP_REDUCE_MAX ? -INFINITY : 0.0;
  double nred = (double)R;
  const float *xf = a->data;
  const double *xd = a->data;
  const uint16_t *xh = a->data; /* bf16: each value widened exactly, summed in double as rt_load's */
  if (leading) {
    int64_t blocks = (O + REDUCE_BLOCK - 1) / REDUCE_BLOCK;
#pragma omp parallel for schedule(static) if (O * R > RT_PAR_MIN && blocks > 1)
    for (int64_t b = 0; b < blocks; b++) {
      int64_t o0 = b * REDUCE_BLOCK;
      int n = (int)(O - o0 < REDUCE_BLOCK ? O - o0 : REDUCE_BLOCK);
      double acc[REDUCE_BLOCK];
      for (int j = 0; j < n; j++) acc[j] = init;
      for (int64_t r = 0; r < R; r++) {
        if (op == IR_OP_REDUCE_MAX) {
          for (int j = 0; j < n; j++)
            acc[j] = reduce_step(op, acc[j], dt == IR_DT_F32    ? xf[r * O + o0 + j]
                                             : dt == IR_DT_BF16 ? rt_bf16_value(xh[r * O + o0 + j])
                                                                : xd[r * O + o0 + j]);
        } else if (dt == IR_DT_BF16) {
          const uint16_t *x = xh + r * O + o0;
          for (int j = 0; j < n; j++) acc[j] += rt_bf16_value(x[j]);
        } else if (dt == IR_DT_F32) {
          const float *x = xf + r * O + o0;
          for (int j = 0; j < n; j++) acc[j] += x[j];
        } else {
          const double *x = xd + r * O + o0;
          for (int j = 0; j < n; j++) acc[j] += x[j];
        }
      }
      for (int j = 0; j < n; j++)
        rt_store(dt, out->data, o0 + j, op == IR_OP_REDUCE_MEAN ? acc[j] / nred : acc[j]);
    }
    return true;
  }
#pragma omp parallel for schedule(static) if (O * R > RT_PAR_MIN && O > 1)
  for (int64_t o = 0; o < O; o++) {
    double acc = init;
    if (dt == IR_DT_F32) {
      const float *x = xf + o * R;
      for (int64_t r = 0; r < R; r++) acc = reduce_step(op, acc, x[r]);
    } else if (dt == IR_DT_BF16) {
      const uint16_t *x = xh + o * R;
      for (int64_t r = 0; r < R; r++) acc = reduce_step(op, acc, rt_bf16_value(x[r]));
    } else {
      const double *x = xd + o * R;
      for (int64_t r = 0; r < R; r++) acc = reduce_step(op, acc, x[r]);
    }
    rt_store(dt, out->data, o, op == IR_OP_REDUCE_MEAN ? acc / nred : acc);
  }
  return true;
}

int rt_kern_reduce(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  ir_op op = k->node->op;
  int rank = a->type.rank;
  bool reduced[IR_MAX_RANK] = {0};
  const ir_attr *axes = ir_node_attr(k->node, "axes");
  if (!axes) { /* absent: every axis */
    for (int d = 0; d < rank; d++) reduced[d] = true;
  } else {
    if (axes->kind != IR_ATTR_INTS) {
      rt_kerr(k, "%s %%%s: 'axes' must be a list", ir_op_name(op), rt_value_name(k->node->out[0]));
      return -1;
    }
    for (int i = 0; i < axes->n; i++) {
      int64_t ax = axes->ints[i];
      if (ax < 0 || ax >= rank) {
        rt_kerr(k, "%s %%%s: axis %lld out of range", ir_op_name(op),
                rt_value_name(k->node->out[0]), (long long)ax);
        return -1;
      }
      reduced[ax] = true;
    }
  }
  if (reduce_fast(k, reduced)) return 0;
  int64_t strides[IR_MAX_RANK];
  row_major_strides(&a->type, strides);
  int64_t kdims[IR_MAX_RANK], kstr[IR_MAX_RANK], rdims[IR_MAX_RANK], rstr[IR_MAX_RANK];
  int nk = 0, nr = 0;
  int64_t nred = 1;
  for (int d = 0; d < rank; d++) {
    if (reduced[d]) {
      rdims[nr] = a->type.dims[d], rstr[nr++] = strides[d];
      nred *= a->type.dims[d];
    } else {
      kdims[nk] = a->type.dims[d], kstr[nk++] = strides[d];
    }
  }
  int64_t nout = rt_numel(&out->type);
  ir_dtype adt = a->type.dtype, odt = out->type.dtype;
#pragma omp parallel for schedule(static) if (nout * nred > RT_PAR_MIN && nout > 1)
  for (int64_t o = 0; o < nout; o++) {
    int64_t base = 0, rem = o;
    for (int d = nk - 1; d >= 0; d--) {
      base += (rem % kdims[d]) * kstr[d];
      rem /= kdims[d];
    }
    double acc = op == IR_OP_REDUCE_MAX ? -INFINITY : 0.0;
    int64_t idx[IR_MAX_RANK] = {0};
    int64_t off = base;
    for (int64_t r = 0; r < nred; r++) {
      double x = rt_load(adt, a->data, off);
      if (op == IR_OP_REDUCE_MAX) {
        if (x > acc || x != x) acc = x; /* NaN propagates: nothing is > NaN */
      } else {
        acc += x;
      }
      /* odometer over the reduced dims, last fastest */
      for (int d = nr - 1; d >= 0; d--) {
        off += rstr[d];
        if (++idx[d] < rdims[d]) break;
        off -= rstr[d] * rdims[d];
        idx[d] = 0;
      }
    }
    if (op == IR_OP_REDUCE_MEAN) acc /= (double)nred;
    rt_store(odt, out->data, o, acc);
  }
  return 0;
}

/* softmax / log_softmax along one axis: each line [outer, :, inner] alone. */
int rt_kern_softmax(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  int64_t axis = ir_node_attr_int(k->node, "axis", a->type.rank - 1);
  if (axis < 0 || axis >= a->type.rank) {
    rt_kerr(k, "%s %%%s: bad axis %lld", ir_op_name(k->node->op), rt_value_name(k->node->out[0]),
            (long long)axis);
    return -1;
  }
  bool log_form = k->node->op == IR_OP_LOG_SOFTMAX;
  int64_t outer = 1, inner = 1, dim = a->type.dims[axis];
  for (int d = 0; d < axis; d++) outer *= a->type.dims[d];
  for (int d = (int)axis + 1; d < a->type.rank; d++) inner *= a->type.dims[d];
  int64_t lines = outer * inner;
  ir_dtype adt = a->type.dtype, odt = out->type.dtype;
#pragma omp parallel for schedule(static) if (lines * dim > RT_PAR_MIN && lines > 1)
  for (int64_t l = 0; l < lines; l++) {
    int64_t base = (l / inner) * dim * inner + l % inner;
    double mx = -INFINITY;
    for (int64_t j = 0; j < dim; j++) {
      double x = rt_load(adt, a->data, base + j * inner);
      if (x > mx || x != x) mx = x;
    }
    if (mx == -INFINITY) mx = 0; /* all -inf: avoid inf - inf */
    double sum = 0;
    for (int64_t j = 0; j < dim; j++) sum += exp(rt_load(adt, a->data, base + j * inner) - mx);
    double lse = log(sum);
    for (int64_t j = 0; j < dim; j++) {
      double x = rt_load(adt, a->data, base + j * inner) - mx;
      rt_store(odt, out->data, base + j * inner, log_form ? x - lse : exp(x) / sum);
    }
  }
  return 0;
}

/* x[..., D]: (x - mean) / sqrt(var + eps) * gamma + beta, population variance */
int rt_kern_layernorm(const rt_kctx *k) {
  const rt_tensor *x = k->in[0], *gamma = k->in[1], *beta = k->in[2];
  rt_tensor *out = k->out[0];
  double eps = ir_node_attr_float(k->node, "eps", 1e-5);
  int64_t D = x->type.rank ? x->type.dims[x->type.rank - 1] : 1;
  int64_t rows = D ? rt_numel(&x->type) / D : 0;
  ir_dtype xdt = x->type.dtype;
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++) rt_layernorm_row(xdt, x->data, r * D, D, eps, gamma, beta, out);
  return 0;
}

/* x[..., D]: x / sqrt(mean(x^2) + eps) * gamma */
int rt_kern_rmsnorm(const rt_kctx *k) {
  const rt_tensor *x = k->in[0], *gamma = k->in[1];
  rt_tensor *out = k->out[0];
  double eps = ir_node_attr_float(k->node, "eps", 1e-5);
  int64_t D = x->type.rank ? x->type.dims[x->type.rank - 1] : 1;
  int64_t rows = D ? rt_numel(&x->type) / D : 0;
  ir_dtype xdt = x->type.dtype, gdt = gamma->type.dtype, odt = out->type.dtype;
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = r * D;
    double ms = 0;
    for (int64_t j = 0; j < D; j++) {
      double v = rt_load(xdt, x->data, base + j);
      ms += v * v;
    }
    ms /= (double)D;
    double inv = 1.0 / sqrt(ms + eps);
    for (int64_t j = 0; j < D; j++)
      rt_store(odt, out->data, base + j, rt_load(xdt, x->data, base + j) * inv * rt_load(gdt, gamma->data, j));
  }
  return 0;
}

/* layernorm_grad / rmsnorm_grad (x[..., D], gamma[D], dy[..., D]) -> (dx,
 * dgamma[, dbeta]), the statistics recomputed from x, all in double:
 *   mean = sum(x) / D (layernorm; 0 for rmsnorm), var = sum((x - mean)^2) / D,
 *   rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd, gh = dy gamma,
 *   dx = (gh - xhat mean(gh xhat) - mean(gh)) rstd   (no mean(gh) for rmsnorm),
 *   dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy.
 * The forward's y = xhat gamma (+ beta) differentiated as passes/vjp.c
 * expanded it before. Rows in parallel for dx, then blocks of columns in
 * parallel for dgamma / dbeta, each column summed in row order. */
/* The f32 form of the rows of norm_grad below (x, gamma, dy, dx all f32):
 * the same expressions in the same order on the same doubles, for R rows at
 * once (j outer, rows inner), so that each row's sequential sums (latency
 * bound one at a time) run as R independent chains. mean, rstd into st. */
enum { NG_ROWS = 8 };
static void norm_grad_rows_f32(bool ln, double eps, int64_t D, int64_t r0, int64_t nr, const float *x,
                               const float *gamma, const float *dy, void *dx, ir_dtype odt, double *st) {
  double mean[NG_ROWS] = {0}, var[NG_ROWS] = {0}, m1[NG_ROWS] = {0}, m2[NG_ROWS] = {0}, rstd[NG_ROWS];
  const float *xr[NG_ROWS], *dyr[NG_ROWS];
  for (int64_t i = 0; i < nr; i++) xr[i] = x + (r0 + i) * D, dyr[i] = dy + (r0 + i) * D;
  if (ln) {
    for (int64_t j = 0; j < D; j++)
      for (int64_t i = 0; i < nr; i++) mean[i] += (double)xr[i][j];
    for (int64_t i = 0; i < nr; i++) mean[i] /= (double)D;
  }
  for (int64_t j = 0; j < D; j++)
    for (int64_t i = 0; i < nr; i++) {
      double c = (double)xr[i][j] - mean[i];
      var[i] += c * c;
    }
  for (int64_t i = 0; i < nr; i++) rstd[i] = 1.0 / sqrt(var[i] / (double)D + eps);
  for (int64_t j = 0; j < D; j++)
    for (int64_t i = 0; i < nr; i++) {
      double gh = (double)dyr[i][j] * (double)gamma[j];
      m1[i] += gh;
      m2[i] += gh * ((double)xr[i][j] - mean[i]) * rstd[i];
    }
  for (int64_t i = 0; i < nr; i++) {
    double a1 = ln ? m1[i] / (double)D : 0, a2 = m2[i] / (double)D, rs = rstd[i], mu = mean[i];
    float *o = (float *)dx + (r0 + i) * D;
    for (int64_t j = 0; j < D && odt == IR_DT_F32; j++) {
      double gh = (double)dyr[i][j] * (double)gamma[j];
      double xhat = ((double)xr[i][j] - mu) * rs;
      o[j] = ir_round_f32((gh - xhat * a2 - a1) * rs);
    }
    for (int64_t j = 0; j < D && odt != IR_DT_F32; j++) { /* bf16 operands widened (below): rounded as rt_store rounds */
      double gh = (double)dyr[i][j] * (double)gamma[j];
      double xhat = ((double)xr[i][j] - mu) * rs;
      rt_store(odt, dx, (r0 + i) * D + j, (gh - xhat * a2 - a1) * rs);
    }
    st[2 * (r0 + i)] = mu;
    st[2 * (r0 + i) + 1] = rs;
  }
}

int rt_kern_norm_grad(const rt_kctx *k) {
  const rt_tensor *x = k->in[0], *gamma = k->in[1], *dy = k->in[2];
  bool ln = k->node->op == IR_OP_LAYERNORM_GRAD;
  double eps = ir_node_attr_float(k->node, "eps", 1e-5);
  int64_t D = x->type.rank ? x->type.dims[x->type.rank - 1] : 1;
  int64_t rows = D ? rt_numel(&x->type) / D : 0;
  ir_dtype xdt = x->type.dtype, gdt = gamma->type.dtype, odt = k->out[0]->type.dtype, pdt = k->out[1]->type.dtype;
  size_t mark = rt_scratch_mark();
  double *st = rt_scratch_push((size_t)(rows > 0 ? rows : 1) * 2 * sizeof *st); /* mean, rstd per row */
  if (!st) {
    rt_kerr(k, "%s %%%s: out of scratch memory", ir_op_name(k->node->op), rt_value_name(k->node->out[0]));
    return -1;
  }
  /* f32 as stored; bf16 widened to floats first (exact: the same doubles as rt_load's) and run through the
   * f32 form */
  bool f32 = xdt == IR_DT_F32 && gdt == IR_DT_F32 && odt == IR_DT_F32;
  bool bf = xdt == IR_DT_BF16 && gdt == IR_DT_BF16 && odt == IR_DT_BF16;
  const float *xf = x->data, *gf = gamma->data, *dyf = dy->data;
  if (bf) {
    float *w = rt_scratch_push((size_t)(2 * rows * D + D + 1) * sizeof *w);
    if (!w) {
      rt_scratch_pop(mark);
      rt_kerr(k, "%s %%%s: out of scratch memory", ir_op_name(k->node->op), rt_value_name(k->node->out[0]));
      return -1;
    }
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN)
    for (int64_t i = 0; i < rows * D; i++) {
      w[i] = rt_bf16_value(((const uint16_t *)x->data)[i]);
      w[rows * D + i] = rt_bf16_value(((const uint16_t *)dy->data)[i]);
    }
    for (int64_t j = 0; j < D; j++) w[2 * rows * D + j] = rt_bf16_value(((const uint16_t *)gamma->data)[j]);
    xf = w, dyf = w + rows * D, gf = w + 2 * rows * D;
    f32 = true;
  }
#pragma omp parallel for schedule(static) if (f32 && rows * D > RT_PAR_MIN && rows > NG_ROWS)
  for (int64_t r0 = 0; r0 < (f32 ? rows : 0); r0 += NG_ROWS)
    norm_grad_rows_f32(ln, eps, D, r0, rows - r0 < NG_ROWS ? rows - r0 : NG_ROWS, xf, gf, dyf, k->out[0]->data, odt,
                       st);
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < (f32 ? 0 : rows); r++) {
    const int64_t base = r * D;
    double mean = 0, var = 0, m1 = 0, m2 = 0;
    if (ln) {
      for (int64_t j = 0; j < D; j++) mean += rt_load(xdt, x->data, base + j);
      mean /= (double)D;
    }
    for (int64_t j = 0; j < D; j++) {
      double c = rt_load(xdt, x->data, base + j) - mean;
      var += c * c;
    }
    double rstd = 1.0 / sqrt(var / (double)D + eps);
    for (int64_t j = 0; j < D; j++) {
      double gh = rt_load(xdt, dy->data, base + j) * rt_load(gdt, gamma->data, j);
      m1 += gh;
      m2 += gh * (rt_load(xdt, x->data, base + j) - mean) * rstd;
    }
    m1 = ln ? m1 / (double)D : 0;
    m2 /= (double)D;
    for (int64_t j = 0; j < D; j++) {
      double gh = rt_load(xdt, dy->data, base + j) * rt_load(gdt, gamma->data, j);
      double xhat = (rt_load(xdt, x->data, base + j) - mean) * rstd;
      rt_store(odt, k->out[0]->data, base + j, (gh - xhat * m2 - m1) * rstd);
    }
    st[2 * r] = mean;
    st[2 * r + 1] = rstd;
  }
  enum { COLS = 64 };
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN && D > COLS)
  for (int64_t j0 = 0; j0 < D; j0 += COLS) {
    double sg[COLS] = {0}, sb[COLS] = {0};
    int64_t n = D - j0 < COLS ? D - j0 : COLS;
    for (int64_t r = 0; r < rows && f32; r++) { /* the same, on the floats as stored */
      const float *dyr = dyf + r * D + j0, *xr = xf + r * D + j0;
      double mu = st[2 * r], rs = st[2 * r + 1];
      for (int64_t j = 0; j < n; j++) {
        double g = dyr[j];
        sg[j] += g * ((double)xr[j] - mu) * rs;
        sb[j] += g;
      }
    }
    for (int64_t r = 0; r < rows && !f32; r++)
      for (int64_t j = 0; j < n; j++) {
        double g = rt_load(xdt, dy->data, r * D + j0 + j);
        sg[j] += g * (rt_load(xdt, x->data, r * D + j0 + j) - st[2 * r]) * st[2 * r + 1];
        sb[j] += g;
      }
    for (int64_t j = 0; j < n; j++) {
      rt_store(pdt, k->out[1]->data, j0 + j, sg[j]);
      if (ln) rt_store(pdt, k->out[2]->data, j0 + j, sb[j]);
    }
  }
  rt_scratch_pop(mark);
  return 0;
}

/* argmax along {axis}: best = 0, then every later element strictly greater
 * than the best so far wins (so the first maximum; a NaN never wins after
 * index 0 and, at index 0, keeps it) — what tgc train's token accuracy
 * counted on the host before. */
/* kernels.h: the first maximum of x[base + v * inner], v < n */
int64_t rt_argmax_line(ir_dtype dt, const void *data, int64_t base, int64_t n, int64_t inner) {
  int64_t best = 0;
  if (dt == IR_DT_F32) { /* the same comparisons, on the floats as stored */
    const float *x = (const float *)data + base;
    for (int64_t v = 1; v < n; v++)
      if (x[v * inner] > x[best * inner]) best = v;
  } else {
    double bv = rt_load(dt, data, base);
    for (int64_t v = 1; v < n; v++) {
      double x = rt_load(dt, data, base + v * inner);
      if (x > bv) bv = x, best = v;
    }
  }
  return best;
}

int rt_kern_argmax(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  int64_t axis = ir_node_attr_int(k->node, "axis", 0);
  if (axis < 0 || axis >= a->type.rank) {
    rt_kerr(k, "argmax %%%s: bad axis %lld", rt_value_name(k->node->out[0]), (long long)axis);
    return -1;
  }
  int64_t n = a->type.dims[axis], inner = 1, outer = 1;
  for (int d = (int)axis + 1; d < a->type.rank; d++) inner *= a->type.dims[d];
  for (int d = 0; d < axis; d++) outer *= a->type.dims[d];
  int64_t rows = outer * inner;
#pragma omp parallel for schedule(static) if (rows * n > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++)
    ((int32_t *)out->data)[r] = (int32_t)rt_argmax_line(a->type.dtype, a->data, r / inner * n * inner + r % inner, n, inner);
  return 0;
}

int64_t rt_count_nonfinite_range(const rt_tensor *x, int64_t i0, int64_t n) {
  ir_dtype dt = x->type.dtype;
  if (n <= 0) return 0; /* an empty tensor's data may be NULL */
  if (dt == IR_DT_F64) return rt_count_ones_u64((const uint64_t *)x->data + i0, n, 0x7ff0000000000000ull);
  if (dt == IR_DT_F32) return rt_count_ones_u32((const uint32_t *)x->data + i0, n, 0x7f800000u);
  if (dt == IR_DT_BF16 || dt == IR_DT_F16)
    return rt_count_ones_u16((const uint16_t *)x->data + i0, n, dt == IR_DT_BF16 ? 0x7f80 : 0x7c00);
  return 0;
}

/* Elements of x that are Inf or NaN (exponent bits all ones), in one
 * threaded pass: each thread counts a contiguous range (vec_math.c). */
static int64_t count_nonfinite_of(const rt_tensor *x) {
  int64_t n = rt_numel(&x->type), bad = 0;
#pragma omp parallel reduction(+ : bad) if (n > RT_PAR_MIN)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    bad += rt_count_nonfinite_range(x, i0, i1 - i0);
  }
  return bad;
}

/* The Inf / NaN elements of every float operand, plus every i64[] operand
 * (a count its producer took as it stored the values: a fused node's
 * {nonfinite}); integers: any order gives the same count. */
int rt_kern_count_nonfinite(const rt_kctx *k) {
  int64_t bad = 0;
  for (int i = 0; i < k->node->n_in; i++)
    bad += k->in[i]->type.dtype == IR_DT_I64 ? *(const int64_t *)k->in[i]->data : count_nonfinite_of(k->in[i]);
  *(int64_t *)k->out[0]->data = bad;
  return 0;
}

/* sum_squares: per operand, from 0 in row-major order in double, the
 * additions reduce_sum makes over square(f64(x)) (rt_kern_reduce's order);
 * the operands' sums then added left to right, as the chain of adds it
 * replaces (fuse-elementwise): the same bits. */
int rt_kern_sum_squares(const rt_kctx *k) {
  double total = 0;
  for (int i = 0; i < k->node->n_in; i++) {
    const rt_tensor *x = k->in[i];
    int64_t n = rt_numel(&x->type);
    double acc = 0;
    if (x->type.dtype == IR_DT_F32) {
      const float *f = x->data;
      for (int64_t j = 0; j < n; j++) acc += ir_s_square((double)f[j], 0);
    } else {
      for (int64_t j = 0; j < n; j++) acc += ir_s_square(rt_load(x->type.dtype, x->data, j), 0);
    }
    total = i == 0 ? acc : total + acc;
  }
  *(double *)k->out[0]->data = total;
  return 0;
}
