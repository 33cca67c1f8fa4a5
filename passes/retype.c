/* passes/retype.c — a graph as if written in another floating-point dtype:
 * every float value (and every cast to a float dtype) becomes dt. For the
 * analyses only (`tgc stats --dtype`, `tgc plan --dtype`): the result is
 * costed and measured, never run — a model written in f32 is then costed as
 * the same model held in bf16. */
#include "pass.h"

void pass_retype_floats(ir_graph *g, ir_dtype dt) {
  for (int i = 0; i < g->n_values; i++)
    if (ir_dtype_is_float(g->values[i]->type.dtype)) g->values[i]->type.dtype = dt;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    for (int k = 0; n->op == IR_OP_CAST && k < n->n_attrs; k++)
      if (n->attrs[k].kind == IR_ATTR_DTYPE && n->attrs[k].i >= 0 && n->attrs[k].i < IR_NUM_DTYPES &&
          ir_dtype_is_float((ir_dtype)n->attrs[k].i))
        n->attrs[k].i = dt;
  }
}
