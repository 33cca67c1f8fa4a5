/* runtime/cpu/kern_nn.c — sources (const, iota) and model ops (embedding,
 * cross_entropy and its gradient, causal_mask).
 *
 * Ids and targets are checked before any work: the first one out of range
 * fails the kernel with a message naming the ids/targets value, the element
 * and the bad id. cross_entropy and cross_entropy_grad share one row routine
 * (rt_ce_rows): each position's max-shifted exponentials, computed once per
 * row. cross_entropy computes each position's logsumexp(logits) -
 * logits[target] in parallel into a scratch array and sums it sequentially,
 * so the mean does not depend on the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "scalar.h"

int rt_kern_const(const rt_kctx *k) {
  rt_tensor_fill(k->out[0], ir_node_attr_float(k->node, "value", 0.0));
  return 0;
}

int rt_kern_iota(const rt_kctx *k) {
  rt_tensor *out = k->out[0];
  int rank = out->type.rank;
  int64_t axis = ir_node_attr_int(k->node, "axis", 0);
  if (rank == 0) { /* the single element's index is 0 */
    rt_store(out->type.dtype, out->data, 0, 0);
    return 0;
  }
  if (axis < 0 || axis >= rank) {
    rt_kerr(k, "iota %%%s: bad axis %lld", rt_value_name(k->node->out[0]), (long long)axis);
    return -1;
  }
  int64_t inner = 1, dim = out->type.dims[axis];
  for (int d = (int)axis + 1; d < rank; d++) inner *= out->type.dims[d];
  int64_t n = rt_numel(&out->type);
  ir_dtype dt = out->type.dtype;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) rt_store(dt, out->data, i, (double)(i / inner % dim));
  return 0;
}

int64_t rt_first_out_of_range(const rt_tensor *ids, int64_t high, int64_t *bad) {
  int64_t n = rt_numel(&ids->type);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = rt_load_int(ids->type.dtype, ids->data, i);
    if (v < 0 || v >= high) {
      *bad = v;
      return i;
    }
  }
  return -1;
}

/* (table[V, D], ids int[...]) -> [..., D] */
int rt_kern_embedding(const rt_kctx *k) {
  const rt_tensor *table = k->in[0], *ids = k->in[1];
  rt_tensor *out = k->out[0];
  int64_t V = table->type.dims[0], D = table->type.rank > 1 ? table->type.dims[1] : 1;
  int64_t bad, at = rt_first_out_of_range(ids, V, &bad);
  if (at >= 0) {
    rt_kerr(k, "embedding id %lld out of range [0, %lld) in %%%s (element %lld)", (long long)bad,
            (long long)V, rt_value_name(k->node->in[1]), (long long)at);
    return -1;
  }
  int64_t n = rt_numel(&ids->type);
  size_t row = (size_t)D * ir_dtype_size(table->type.dtype);
  const char *src = table->data;
  char *dst = out->data;
  ir_dtype idt = ids->type.dtype;
#pragma omp parallel for schedule(static) if (n * D > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    memcpy(dst + (size_t)i * row, src + (size_t)rt_load_int(idt, ids->data, i) * row, row);
  return 0;
}

/* kernels.h: the rows of cross_entropy and of its gradient, rows in
 * parallel with one scratch row of exponentials per thread, kept from the
 * sum to the division. */
int rt_ce_rows(const rt_tensor *logits, const rt_tensor *targets, double *loss, rt_tensor *grad, double scale) {
  int64_t V = logits->type.rank ? logits->type.dims[logits->type.rank - 1] : 1;
  int64_t P = rt_numel(&targets->type);
  ir_dtype ldt = logits->type.dtype, tdt = targets->type.dtype, odt = grad ? grad->type.dtype : IR_DT_F32;
  bool oom = false;
#pragma omp parallel if (P * V > RT_PAR_MIN && P > 1)
  {
    size_t mark = rt_scratch_mark();
    double *e = rt_scratch_push((size_t)(V ? V : 1) * sizeof *e);
    if (!e) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(static)
    for (int64_t p = 0; p < P; p++) {
      if (!e) continue;
      int64_t base = p * V;
      double mx, sum;
      rt_row_logsumexp(ldt, logits->data, base, V, &mx, &sum, e);
      int64_t t = rt_load_int(tdt, targets->data, p);
      if (loss) loss[p] = mx + log(sum) - rt_load(ldt, logits->data, base + t);
      if (grad && odt == IR_DT_F32) {
        float *o = (float *)grad->data + base;
        /* (e/sum - 0) * scale is (e/sum) * scale: the vectorized row, then the target */
        rt_softmax_scaled_f32(o, e, sum, scale, V);
        o[t] = rt_round_f32((e[t] / sum - 1.0) * scale);
      } else if (grad) {
        for (int64_t j = 0; j < V; j++) rt_store(odt, grad->data, base + j, (e[j] / sum - (j == t ? 1.0 : 0.0)) * scale);
      }
    }
    rt_scratch_pop(mark);
  }
  return oom ? -1 : 0;
}

/* Checks the targets of op k (operand 1) against V; -1 with the message. */
static int ce_check_targets(const rt_kctx *k, int64_t V) {
  int64_t bad, at = rt_first_out_of_range(k->in[1], V, &bad);
  if (at < 0) return 0;
  rt_kerr(k, "%s target %lld out of range [0, %lld) in %%%s (element %lld)", ir_op_name(k->node->op), (long long)bad,
          (long long)V, rt_value_name(k->node->in[1]), (long long)at);
  return -1;
}

static int64_t ce_vocab(const rt_tensor *logits) {
  return logits->type.rank ? logits->type.dims[logits->type.rank - 1] : 1;
}

/* (logits[..., V], targets int[...]) -> [] mean of logsumexp - logits[target] */
int rt_kern_cross_entropy(const rt_kctx *k) {
  const rt_tensor *logits = k->in[0], *targets = k->in[1];
  rt_tensor *out = k->out[0];
  if (ce_check_targets(k, ce_vocab(logits)) != 0) return -1;
  int64_t P = rt_numel(&targets->type);
  size_t mark = rt_scratch_mark();
  double *loss = rt_scratch_push((size_t)(P ? P : 1) * sizeof *loss);
  if (!loss || rt_ce_rows(logits, targets, loss, NULL, 0) != 0) {
    rt_scratch_pop(mark);
    rt_kerr(k, "out of memory in cross_entropy %%%s", rt_value_name(k->node->out[0]));
    return -1;
  }
  double total = 0;
  for (int64_t p = 0; p < P; p++) total += loss[p];
  rt_scratch_pop(mark);
  rt_store(out->type.dtype, out->data, 0, total / (double)P);
  return 0;
}

/* (logits[..., V], targets int[...], g[]) -> (softmax(logits) - onehot(targets)) * g / P */
int rt_kern_cross_entropy_grad(const rt_kctx *k) {
  const rt_tensor *logits = k->in[0], *targets = k->in[1], *gs = k->in[2];
  if (ce_check_targets(k, ce_vocab(logits)) != 0) return -1;
  int64_t P = rt_numel(&targets->type);
  double scale = rt_load(gs->type.dtype, gs->data, 0) / (double)(P ? P : 1);
  if (rt_ce_rows(logits, targets, NULL, k->out[0], scale) != 0) {
    rt_kerr(k, "out of memory in cross_entropy_grad %%%s", rt_value_name(k->node->out[0]));
    return -1;
  }
  return 0;
}

/* x[..., T, S]: fill (default -inf) where col > row + (S - T), else x */
int rt_kern_causal_mask(const rt_kctx *k) {
  const rt_tensor *x = k->in[0];
  rt_tensor *out = k->out[0];
  int rank = x->type.rank;
  if (rank < 2) {
    rt_kerr(k, "causal_mask %%%s: operand needs rank >= 2", rt_value_name(k->node->out[0]));
    return -1;
  }
  int64_t T = x->type.dims[rank - 2], S = x->type.dims[rank - 1];
  int64_t mats = T != 0 && S != 0 ? rt_numel(&x->type) / (T * S) : 0;
  int64_t rows = mats * T;
  ir_dtype xdt = x->type.dtype, odt = out->type.dtype;
  double fill = ir_node_attr_float(k->node, "fill", -INFINITY);
#pragma omp parallel for schedule(static) if (rows * S > RT_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t row = r % T;
    for (int64_t c = 0; c < S; c++) {
      int64_t i = r * S + c;
      rt_store(odt, out->data, i, c > row + (S - T) ? fill : rt_load(xdt, x->data, i));
    }
  }
  return 0;
}

/* dropout (ops.def): the inference form copies x; the training form keeps
 * element e (x * scale) unless the bits at its global index g fall under
 * the threshold. g = sum_d pos_d[e_d] strides[d] (the positions are this
 * shard's block of the unsharded value's). */
int rt_kern_dropout(const rt_kctx *k) {
  const rt_tensor *x = k->in[0];
  rt_tensor *out = k->out[0];
  ir_dtype xdt = x->type.dtype, odt = out->type.dtype;
  int64_t n = rt_numel(&x->type);
  if (k->node->n_in == 1) {
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) rt_store(odt, out->data, i, rt_load(xdt, x->data, i));
    return 0;
  }
  int rank = x->type.rank;
  double p = ir_node_attr_float(k->node, "p", 0);
  const ir_attr *sa = ir_node_attr(k->node, "strides");
  int64_t key;
  memcpy(&key, k->in[1]->data, sizeof key);
  uint64_t skey = ir_dropout_stream_key((uint64_t)key, (uint64_t)ir_node_attr_int(k->node, "stream", 0));
  uint32_t threshold = ir_dropout_threshold(p);
  double scale = ir_round_to_dtype(odt, 1.0 / (1.0 - p));
  const int64_t *pos[IR_MAX_RANK];
  for (int d = 0; d < rank; d++) pos[d] = (const int64_t *)k->in[2 + d]->data;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    uint64_t g = 0;
    int64_t r = i;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t e = r % x->type.dims[d];
      r /= x->type.dims[d];
      g += (uint64_t)pos[d][e] * (uint64_t)sa->ints[d];
    }
    bool keep = ir_dropout_bits(skey, g) >= threshold;
    rt_store(odt, out->data, i, keep ? rt_load(xdt, x->data, i) * scale : 0.0);
  }
  return 0;
}
