/* runtime/cpu/kern_cast.c — a fused node that is one conversion between f32
 * and bf16 ("(cast bf16 $0)", "(cast f32 $0)" over an operand of the
 * result's shape): what a mixed-precision step is made of around its
 * products (the f32 master parameters to bf16 each step, the bf16
 * gradients back to f32: about 250 such nodes per gpt2-124m step). The
 * general fused interpreter (kern_fused.c) runs them at a few ns per
 * element; here they are one pass over memory.
 *
 * The results are the interpreter's bit for bit, through the same inline
 * conversions (kernels.h): f32 -> bf16 rounds the f32 bits to nearest even
 * (the double of an f32 is exact, so this is the one rounding
 * ir_round_to_dtype makes; a NaN is quieted, its payload kept), bf16 -> f32
 * shifts the bits (an exact widening; a signalling NaN quieted, as the
 * interpreter's pass through a double does). test_cast_fast holds the two paths
 * equal on zeros, subnormals, the largest values, infinities, NaNs, ties
 * and every bf16 bit pattern. */
#include "kernels.h"

/* 1 when the node is such a conversion (and has run), 0 when it is not one
 * (the caller runs the interpreter). */
void rt_round_to_bf16(uint16_t *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dst[i] = rt_bf16_bits(src[i]);
}

int rt_kern_fused_cast(const rt_kctx *k, const ir_expr *e) {
  const ir_node *n = k->node;
  if (n->n_in != 1 || n->n_out != 1 || e->n_ins != 2 || e->n_results != 1 || e->results[0] != 1) return 0;
  const ir_expr_inst *ld = &e->ins[0], *cv = &e->ins[1];
  if (ld->kind != IR_EXPR_OPERAND || ld->index != 0 || cv->kind != IR_EXPR_OP || cv->op != IR_OP_CAST || cv->arg[0] != 0)
    return 0;
  const rt_tensor *x = k->in[0];
  rt_tensor *y = k->out[0];
  ir_dtype from = x->type.dtype, to = y->type.dtype;
  bool down = from == IR_DT_F32 && to == IR_DT_BF16, up = from == IR_DT_BF16 && to == IR_DT_F32;
  if ((!down && !up) || cv->dtype != to || x->type.rank != y->type.rank ||
      memcmp(x->type.dims, y->type.dims, sizeof(int64_t) * (size_t)x->type.rank) != 0 || x->data == y->data)
    return 0;
  int64_t count = rt_numel(&y->type);
  if (down) {
    rt_round_to_bf16(y->data, x->data, count);
  } else {
    const uint16_t *src = x->data;
    uint32_t *dst = y->data;
#pragma omp parallel for schedule(static) if (count > RT_PAR_MIN)
    for (int64_t i = 0; i < count; i++) dst[i] = rt_bf16_widen_bits(src[i]); /* a signalling NaN comes out quiet */
  }
  return 1;
}
