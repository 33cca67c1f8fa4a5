/* passes/retype.c — a graph as if written in another floating-point dtype:
 * every float value (and every cast to a float dtype) becomes dt.
 *
 * pass_retype_floats does it in place: for the analyses only (`tgc stats
 * --dtype`, `tgc plan --dtype`), whose result is costed and measured, never
 * run — a model written in f32 is then costed as the same model held in
 * bf16. A result whose dtype the op fixes (attention's log-sum-exp is f32
 * whatever q is) keeps what typing gives it, so passes that rebuild nodes
 * (the shard pass) find the types they infer. pass_retyped_copy builds a new graph node by node,
 * inferring every result type again, so what it returns type-checks and can
 * run (`tgc gradcheck` runs a model in f64). */
#include <stdlib.h>

#include "ir_die.h"
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
  for (int i = 0; i < g->n_nodes; i++) { /* results as typing gives them (graph order: operands first) */
    ir_node *n = g->nodes[i];
    if (n->dead || ir_op_kind_of(n->op) == IR_OPK_NULLARY || n->n_out > 16 || n->n_in > 64) continue;
    ir_type tin[64], tout[16];
    for (int k = 0; k < n->n_in; k++) tin[k] = n->in[k]->type;
    int got = 0;
    char err[256];
    if (ir_infer(n->op, tin, n->n_in, n->attrs, n->n_attrs, tout, &got, err, sizeof err) != 0 || got != n->n_out) continue;
    for (int j = 0; j < got; j++) n->out[j]->type.dtype = tout[j].dtype;
  }
}

static ir_type retyped(ir_type t, ir_dtype dt) {
  if (ir_dtype_is_float(t.dtype)) t.dtype = dt;
  return t;
}

ir_graph *pass_retyped_copy(const ir_graph *g, ir_dtype dt, ir_diag *d) {
  ir_graph *h = ir_graph_new(g->name, g->source_file);
  ir_value **map = calloc((size_t)ir_graph_id_bound(g) + 1, sizeof *map);
  if (!map) IR_DIE("out of memory (map)");
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = g->inputs[i];
    map[v->id] = ir_graph_add_input(h, v->name, retyped(v->type, dt), v->loc);
  }
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *v = g->params[i];
    map[v->id] = ir_graph_add_param(h, v->name, retyped(v->type, dt), v->init, v->loc);
  }
  int ok = 1;
  for (int k = 0; k < g->n_nodes && ok; k++) {
    const ir_node *n = g->nodes[k];
    if (n->dead) continue;
    int n_out = n->n_out > 0 ? n->n_out : 1;
    ir_value **in = calloc((size_t)(n->n_in > 0 ? n->n_in : 1), sizeof *in);
    ir_type *tin = calloc((size_t)(n->n_in > 0 ? n->n_in : 1), sizeof *tin);
    ir_type *tout = calloc((size_t)n_out + IR_FUSED_MAX_RESULTS, sizeof *tout);
    ir_attr *attrs = calloc((size_t)(n->n_attrs > 0 ? n->n_attrs : 1), sizeof *attrs);
    const char **names = calloc((size_t)n_out, sizeof *names);
    if (!in || !tin || !tout || !attrs || !names) IR_DIE("out of memory (in || !tin || !tout || !attrs || !names)");
    for (int i = 0; i < n->n_in; i++) {
      in[i] = map[n->in[i]->id];
      tin[i] = in[i]->type;
    }
    for (int i = 0; i < n->n_attrs; i++) {
      attrs[i] = n->attrs[i];
      if (n->op == IR_OP_CAST && attrs[i].kind == IR_ATTR_DTYPE && ir_dtype_is_float((ir_dtype)attrs[i].i))
        attrs[i].i = dt;
    }
    for (int j = 0; j < n->n_out; j++) names[j] = n->out[j]->name;
    if (ir_op_kind_of(n->op) == IR_OPK_NULLARY) tout[0] = retyped(n->out[0]->type, dt);
    int got = 0;
    char err[512];
    if (ir_infer(n->op, tin, n->n_in, attrs, n->n_attrs, tout, &got, err, sizeof err) != 0 || got != n->n_out) {
      ir_error(d, n->loc, "converting to %s: %s", ir_dtype_name(dt), err);
      ok = 0;
    } else {
      ir_node *m = ir_graph_add_node(h, n->op, in, n->n_in, tout, got, attrs, n->n_attrs, names, n->loc);
      m->layer = n->layer;
      for (int j = 0; j < got; j++) {
        m->out[j]->role = n->out[j]->role;
        map[n->out[j]->id] = m->out[j];
      }
    }
    free(in);
    free(tin);
    free(tout);
    free(attrs);
    free(names);
  }
  for (int i = 0; ok && i < g->n_outputs; i++) ir_graph_add_output(h, g->outputs[i].name, map[g->outputs[i].value->id]);
  free(map);
  if (!ok) {
    ir_graph_free(h);
    return NULL;
  }
  return h;
}
