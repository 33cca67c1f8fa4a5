/* runtime/cpu/kern_elementwise.c — unary, binary and where kernels.
 *
 * Every element is computed in double by ir_eval_unary / ir_eval_binary (the
 * functions constant folding uses) and stored rounded to the result dtype,
 * so folded and executed values agree bit for bit. Operands broadcast
 * numpy-style through strides (0 along broadcast dims): the result is walked
 * row by row (all dims but the last), each row in parallel, with a running
 * offset per operand. Contiguous same-shape f32/f64 operands take a fast
 * path with direct loads and stores (same arithmetic, no index math).
 */
#include "kernels.h"

/* Offsets of row r (index over all dims but the last) into each operand. */
static void row_offsets(int64_t r, int rank, const int64_t *dims, int n_ops,
                        int64_t (*strides)[IR_MAX_RANK], int64_t *off) {
  for (int o = 0; o < n_ops; o++) off[o] = 0;
  for (int d = rank - 2; d >= 0; d--) {
    int64_t i = r % dims[d];
    r /= dims[d];
    for (int o = 0; o < n_ops; o++) off[o] += i * strides[o][d];
  }
}

static bool same_contiguous(const rt_tensor *a, const rt_tensor *out) {
  if (a->type.dtype != out->type.dtype || a->type.rank != out->type.rank) return false;
  if (a->type.dtype != IR_DT_F32 && a->type.dtype != IR_DT_F64) return false;
  for (int d = 0; d < a->type.rank; d++)
    if (a->type.dims[d] != out->type.dims[d]) return false;
  return true;
}

int rt_kern_unary(const rt_kctx *k) {
  ir_op op = k->node->op;
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  int64_t n = rt_numel(&out->type);
  if (same_contiguous(a, out)) {
    if (out->type.dtype == IR_DT_F64) {
      const double *x = a->data;
      double *y = out->data;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
      for (int64_t i = 0; i < n; i++) y[i] = ir_eval_unary(op, x[i]);
    } else {
      const float *x = a->data;
      float *y = out->data;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
      for (int64_t i = 0; i < n; i++)
        y[i] = (float)ir_round_to_dtype(IR_DT_F32, ir_eval_unary(op, x[i]));
    }
    return 0;
  }
  /* Same element count and row-major order: unary ops never broadcast. */
  ir_dtype adt = a->type.dtype, odt = out->type.dtype;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) rt_store(odt, out->data, i, ir_eval_unary(op, rt_load(adt, a->data, i)));
  return 0;
}

/* Shared driver for binary (n_ops = 2) and where (n_ops = 3). */
static void broadcast_loop(const rt_kctx *k, int n_ops) {
  ir_op op = k->node->op;
  rt_tensor *out = k->out[0];
  int rank = out->type.rank;
  const int64_t *dims = out->type.dims;
  int64_t strides[3][IR_MAX_RANK];
  for (int o = 0; o < n_ops; o++) rt_broadcast_strides(&k->in[o]->type, rank, dims, strides[o]);
  int64_t inner = rank ? dims[rank - 1] : 1;
  int64_t rows = inner ? rt_numel(&out->type) / inner : 0;
  int64_t inner_stride[3];
  for (int o = 0; o < n_ops; o++) inner_stride[o] = rank ? strides[o][rank - 1] : 0;
  ir_dtype odt = out->type.dtype;
  ir_dtype dt[3];
  const void *data[3];
  for (int o = 0; o < n_ops; o++) dt[o] = k->in[o]->type.dtype, data[o] = k->in[o]->data;
#pragma omp parallel for schedule(static) if (rows * inner > RT_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off[3];
    row_offsets(r, rank, dims, n_ops, strides, off);
    int64_t base = r * inner;
    for (int64_t j = 0; j < inner; j++) {
      double v;
      if (n_ops == 2) {
        v = ir_eval_binary(op, rt_load(dt[0], data[0], off[0]), rt_load(dt[1], data[1], off[1]));
      } else {
        bool c = rt_load(dt[0], data[0], off[0]) != 0;
        v = c ? rt_load(dt[1], data[1], off[1]) : rt_load(dt[2], data[2], off[2]);
      }
      rt_store(odt, out->data, base + j, v);
      for (int o = 0; o < n_ops; o++) off[o] += inner_stride[o];
    }
  }
}

int rt_kern_binary(const rt_kctx *k) {
  ir_op op = k->node->op;
  const rt_tensor *a = k->in[0], *b = k->in[1];
  rt_tensor *out = k->out[0];
  if (same_contiguous(a, out) && same_contiguous(b, out)) {
    int64_t n = rt_numel(&out->type);
    if (out->type.dtype == IR_DT_F64) {
      const double *x = a->data, *y = b->data;
      double *z = out->data;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
      for (int64_t i = 0; i < n; i++) z[i] = ir_eval_binary(op, x[i], y[i]);
    } else {
      const float *x = a->data, *y = b->data;
      float *z = out->data;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
      for (int64_t i = 0; i < n; i++)
        z[i] = (float)ir_round_to_dtype(IR_DT_F32, ir_eval_binary(op, x[i], y[i]));
    }
    return 0;
  }
  broadcast_loop(k, 2);
  return 0;
}

int rt_kern_where(const rt_kctx *k) {
  broadcast_loop(k, 3);
  return 0;
}
