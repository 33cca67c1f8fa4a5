/* passes/mixed_precision.c — a model computed in bf16 or f16 with its
 * parameters (the master weights) in f32: what autocast does, as IR.
 *
 * pass_mixed_precision(g, dt) edits a model graph before autodiff:
 *  - each parameter and each input of the model's float dtype (the dtype
 *    of its first float parameter, else f32) is read through one cast to
 *    dt, placed before every node; nothing else reads the f32 value;
 *  - every node then computes in dt: constants of the model's dtype and
 *    casts to it are retargeted to dt, and every result type is inferred
 *    again, in order, from the operands' (so matmuls, attention, norms,
 *    elementwise chains all take and give dt; attention's lse stays f32 by
 *    its typing rule);
 *  - cross_entropy reads its logits cast to f32, as autocast's fp32 list
 *    has it: the loss and the seed of the backward pass are f32, so a loss
 *    scale (f16 training) never overflows the 16-bit range, and the
 *    reported loss has f32 precision;
 *  - other dtypes (f64 values, integers, bool) are left as they are.
 * Autodiff then gives each parameter its gradient through the cast's VJP:
 * in f32, the dtype of the master weight the update graph updates.
 *
 * requires: a verified graph without fused nodes (the fusion passes run
 * later); invalidates: nothing (the graph stays verified).
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

static ir_dtype model_dtype(const ir_graph *g) {
  for (int i = 0; i < g->n_params; i++)
    if (ir_dtype_is_float(g->params[i]->type.dtype)) return g->params[i]->type.dtype;
  return IR_DT_F32;
}

static ir_value *cast_to(ir_graph *g, ir_value *x, ir_dtype dt) {
  ir_attr to = ir_attr_dtype("to", dt);
  return ir_graph_build1(g, IR_OP_CAST, &x, 1, &to, 1, NULL, x->loc);
}

int pass_mixed_precision(ir_graph *g, ir_dtype dt, ir_diag *d) {
  if (dt != IR_DT_BF16 && dt != IR_DT_F16) {
    ir_error_plain(d, "mixed precision computes in bf16 or f16, not %s", ir_dtype_name(dt));
    return -1;
  }
  ir_dtype from = model_dtype(g);
  if (from == dt) return 0;
  int bound = ir_graph_id_bound(g);
  ir_value **sub = calloc((size_t)bound + 1, sizeof *sub); /* value id -> the cast that replaces it */
  if (!sub) IR_DIE("out of memory (sub)");
  /* 1. casts of the parameters and float inputs, first in the graph */
  int n0 = g->n_nodes, n_casts = 0;
  for (int k = 0; k < 2; k++) {
    ir_value *const *vals = k ? g->inputs : g->params;
    int n = k ? g->n_inputs : g->n_params;
    for (int i = 0; i < n; i++)
      if (vals[i]->type.dtype == from) {
        sub[vals[i]->id] = cast_to(g, vals[i], dt);
        n_casts++;
      }
  }
  ir_graph_move_tail(g, n_casts, 0);
  /* 2. every other node, in order: operands through the casts, computed
   * in dt; cross_entropy's logits through a cast to f32 placed just before it */
  int end = n0 + n_casts;
  for (int i = n_casts; i < end; i++) {
    ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k]->id < bound && sub[n->in[k]->id]) n->in[k] = sub[n->in[k]->id];
    if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) && n->in[0]->type.dtype == dt) {
      n->in[0] = cast_to(g, n->in[0], IR_DT_F32);
      ir_graph_move_tail(g, 1, i); /* n is now at i + 1 */
      i++, end++;
    }
    for (int a = 0; a < n->n_attrs; a++)
      if (n->op == IR_OP_CAST && n->attrs[a].kind == IR_ATTR_DTYPE && n->attrs[a].i == (int64_t)from) n->attrs[a].i = dt;
    ir_type in[64], out[IR_FUSED_MAX_RESULTS + 64];
    if (n->n_in > 64 || n->n_out > (int)(sizeof out / sizeof out[0])) {
      free(sub);
      ir_error(d, n->loc, "mixed precision: %s has too many operands", ir_op_name(n->op));
      return -1;
    }
    for (int k = 0; k < n->n_in; k++) in[k] = n->in[k]->type;
    if (ir_op_kind_of(n->op) == IR_OPK_NULLARY) {
      if (n->op == IR_OP_CONST && n->out[0]->type.dtype == from) n->out[0]->type.dtype = dt;
      continue;
    }
    out[0] = n->out[0]->type;
    int n_out = 0;
    char err[512];
    if (ir_infer(n->op, in, n->n_in, n->attrs, n->n_attrs, out, &n_out, err, sizeof err) != 0 || n_out != n->n_out) {
      free(sub);
      ir_error(d, n->loc, "mixed precision: %s in %s: %s", ir_op_name(n->op), ir_dtype_name(dt), err);
      return -1;
    }
    for (int r = 0; r < n->n_out; r++) n->out[r]->type = out[r];
  }
  free(sub);
  return ir_verify(g, d) == 0 ? 0 : -1;
}
