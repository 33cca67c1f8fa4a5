/* runtime/cpu/kern_grad.c — kernels of the helper ops that backward graphs are
 * made of: unslice (adjoint of slice) and embedding_grad (scatter-add, the
 * adjoint of embedding). cross_entropy_grad shares its rows with
 * cross_entropy (kern_nn.c); sign and gelu_grad are plain unary ops and run
 * through rt_kern_unary.
 *
 * Determinism: embedding_grad splits the work over the D columns of the
 * table gradient, and each column accumulates the rows of g in position
 * order, so repeated ids sum in the same order for any thread count.
 */
#include "kernels.h"

/* x placed at start:end:step along axis of a zero tensor with dim `size`. */
int rt_kern_unslice(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  int64_t axis = ir_node_attr_int(k->node, "axis", -1);
  int rank = a->type.rank;
  if (axis < 0 || axis >= rank || out->type.rank != rank) {
    rt_kerr(k, "unslice %%%s: bad axis %lld", rt_value_name(k->node->out[0]), (long long)axis);
    return -1;
  }
  int64_t start = ir_node_attr_int(k->node, "start", 0), step = ir_node_attr_int(k->node, "step", 1);
  int64_t in_dim = a->type.dims[axis], out_dim = out->type.dims[axis];
  if (step < 1 || start < 0 || (in_dim > 0 && start + (in_dim - 1) * step >= out_dim)) {
    rt_kerr(k, "unslice %%%s: bad start/step", rt_value_name(k->node->out[0]));
    return -1;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= a->type.dims[d];
  for (int d = (int)axis + 1; d < rank; d++) inner *= a->type.dims[d];
  size_t block = (size_t)inner * ir_dtype_size(a->type.dtype);
  const char *src = a->data;
  char *dst = out->data;
#pragma omp parallel for schedule(static) if (outer * in_dim * inner > RT_PAR_MIN)
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < in_dim; j++)
      memcpy(dst + (size_t)(o * out_dim + start + j * step) * block, src + (size_t)(o * in_dim + j) * block, block);
  return 0;
}

/* (ids int[...], g[..., D]) {vocab: V} -> [V, D]: out[ids[p]] += g[p] */
int rt_kern_embedding_grad(const rt_kctx *k) {
  const rt_tensor *ids = k->in[0], *g = k->in[1];
  rt_tensor *out = k->out[0];
  int64_t V = out->type.dims[0], D = out->type.dims[1];
  int64_t P = rt_numel(&ids->type);
  ir_dtype idt = ids->type.dtype, gdt = g->type.dtype, odt = out->type.dtype;
  int64_t bad, at = rt_first_out_of_range(ids, V, &bad);
  if (at >= 0) {
    rt_kerr(k, "embedding_grad id %lld out of range [0, %lld) in %%%s (element %lld)", (long long)bad, (long long)V,
            rt_value_name(k->node->in[0]), (long long)at);
    return -1;
  }
#pragma omp parallel for schedule(static) if (P * D > RT_PAR_MIN && D > 1)
  for (int64_t j = 0; j < D; j++)
    for (int64_t p = 0; p < P; p++) {
      int64_t o = rt_load_int(idt, ids->data, p) * D + j;
      rt_store(odt, out->data, o, rt_load(odt, out->data, o) + rt_load(gdt, g->data, p * D + j));
    }
  return 0;
}
