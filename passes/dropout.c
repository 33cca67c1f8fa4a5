/* passes/dropout.c — dropout's training form (ops.def: DROPOUT).
 *
 * The frontend writes dropout(x, p) as dropout(x) {p}: the inference form,
 * the identity, which canonicalize removes from every graph that is not a
 * training step (`tgc run`, eval, generation). The training builders call
 * pass_key_dropout before autodiff: one i64[] input, the key the trainer
 * sets per micro-batch (rt_dropout_key of seed, step, micro-batch), and per
 * dropout its stream (which dropout of the model, in program order) and
 * the positions of its elements along each dim (an iota per dim, shared by
 * the dropouts of one shape). The shard pass splits the positions as it
 * splits x, so every shard, dp and tp alike, draws the mask of its block
 * of the unsharded value; the backward's dropout (vjp.c) reads the same
 * key, stream and positions, so the mask is drawn again, never kept.
 *
 * requires: a verified graph; invalidates: nothing (nodes are added at the
 * front, operands of the dropouts replaced).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

/* The position iota along dim d of a value of type t: i64 [1, .., t.dims[d], .., 1]. */
static ir_value *positions(ir_graph *g, const ir_type *t, int d, int *added) {
  ir_type pt = {.dtype = IR_DT_I64, .rank = t->rank};
  for (int k = 0; k < t->rank; k++) pt.dims[k] = k == d ? t->dims[d] : 1;
  char name[64];
  snprintf(name, sizeof name, "dropout.pos%d", d);
  ir_attr ax = ir_attr_int("axis", d);
  char err[256];
  ir_node *k = ir_graph_build(g, IR_OP_IOTA, NULL, 0, &ax, 1, &pt, name, (ir_loc){0}, err, sizeof err);
  if (!k) IR_DIE("out of memory (k)"); /* the type is well formed by construction */
  ++*added;
  return k->out[0];
}

int pass_key_dropout(ir_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == IR_OP_DROPOUT && g->nodes[i]->n_in == 1;
  if (n == 0) return -1;
  int key_input = g->n_inputs;
  ir_value *key = ir_graph_add_input(g, "dropout_key", (ir_type){.dtype = IR_DT_I64, .rank = 0}, (ir_loc){0});
  int n_nodes = g->n_nodes, added = 0, stream = 0;
  for (int i = 0; i < n_nodes; i++) {
    ir_node *nd = g->nodes[i];
    if (nd->op != IR_OP_DROPOUT || nd->n_in != 1) continue;
    const ir_type *t = &nd->in[0]->type;
    ir_value **in = ir_arena_alloc(g->arena, (size_t)(t->rank + 2) * sizeof *in);
    in[0] = nd->in[0];
    in[1] = key;
    int64_t strides[IR_MAX_RANK], s = 1;
    for (int d = t->rank - 1; d >= 0; d--) strides[d] = s, s *= t->dims[d];
    for (int d = 0; d < t->rank; d++) in[2 + d] = positions(g, t, d, &added);
    double p = ir_node_attr_float(nd, "p", 0);
    ir_attr *at = ir_arena_alloc(g->arena, 3 * sizeof *at);
    int64_t *kept = ir_arena_alloc(g->arena, (size_t)(t->rank > 0 ? t->rank : 1) * sizeof *kept);
    memcpy(kept, strides, (size_t)t->rank * sizeof *kept);
    at[0] = ir_attr_float("p", p); /* (keys are literals: they outlive the graph) */
    at[1] = ir_attr_int("stream", stream++);
    at[2] = ir_attr_ints("strides", kept, t->rank);
    nd->in = in;
    nd->n_in = t->rank + 2;
    nd->attrs = at;
    nd->n_attrs = 3;
  }
  ir_graph_move_tail(g, added, 0);
  return key_input;
}

/* Streams of the dropouts of node d (standalone, or the dropout
 * instructions of a fused / fused_matmul expression: fuse-elementwise's)
 * into out (room for cap); their count. */
static int node_streams(const ir_node *d, int64_t *out, int cap) {
  if (d->op == IR_OP_DROPOUT) {
    if (d->n_in == 1 || cap < 1) return 0;
    out[0] = ir_node_attr_int(d, "stream", -1);
    return 1;
  }
  const ir_attr *a = d->op == IR_OP_FUSED || d->op == IR_OP_FUSED_MATMUL ? ir_node_attr(d, "expr") : NULL;
  int n = 0;
  for (int k = 0; a && a->expr && k < a->expr->n_ins && n < cap; k++)
    if (a->expr->ins[k].kind == IR_EXPR_OP && a->expr->ins[k].op == IR_OP_DROPOUT) out[n++] = a->expr->ins[k].index;
  return n;
}

int64_t pass_dropout_mask_bytes(const ir_graph *g, int *n_dropouts) {
  /* the backward's dropout shares its forward's stream: count each stream
   * once (a fused dropout's elements: its node's result's) */
  int64_t bytes = 0, *seen = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *d = g->nodes[i];
    int64_t st[64];
    int ns = d->dead ? 0 : node_streams(d, st, 64);
    for (int k = 0; k < ns; k++) {
      bool dup = false;
      for (int j = 0; j < n && !dup; j++) dup = seen[j] == st[k];
      if (dup) continue;
      if (n == cap) {
        cap = cap ? 2 * cap : 64;
        int64_t *ns2 = realloc(seen, (size_t)cap * sizeof *seen);
        if (!ns2) IR_DIE("out of memory (ns2)"); /* a handful of streams per layer */
        seen = ns2;
      }
      seen[n++] = st[k];
      bytes += ir_type_numel(&d->out[0]->type);
    }
  }
  free(seen);
  if (n_dropouts) *n_dropouts = n;
  return bytes;
}
