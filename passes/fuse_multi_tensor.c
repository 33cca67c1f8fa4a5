/* passes/fuse_multi_tensor.c — fuse-elementwise's first rewrite: a sum of
 * per-tensor reductions over many tensors becomes one multi-tensor
 * reduction, as PyTorch's multi_tensor_l2norm does for clip_grad_norm_.
 *
 * The optimizer's update graph (optimizer.c) checks every parameter and
 * clips by the norm of every gradient, one tensor at a time:
 *   nonfinite = add(add(count_nonfinite(p0), count_nonfinite(p1)), ...)
 *   norm^2    = add(add(s0, s1), ...),  s_k = reduce_sum(square(cast f64 g_k))
 *               over all axes (or square(cast f64 g_k) for a scalar g_k)
 * three kernels and a memset per parameter on a GPU (GPT-2 small: 148
 * parameters, ~590 launches a step), and an f64 copy of every gradient
 * written and read back. A left-leaning chain of adds whose first leaves are
 * such reductions (each read only by the chain) becomes
 *   count_nonfinite(p0, p1, ...)  /  sum_squares(g0, g1, ...)
 * in the place of the add that sums them; leaves after the first one that
 * does not match stay added as before. sum_squares adds the tensors' sums
 * left to right, each summed as reduce_sum would (runtime/cpu: the same
 * bits); counts are integers (any order). The chain comes after the shard
 * pass: a rank's partial counts and sums are merged before their
 * all-reduce, so the multi-tensor ops need no sharding rule of their own.
 *
 * requires: a verified graph; invalidates: nothing (merged nodes are marked
 * dead; the caller compacts).
 */
#include <stdlib.h>

#include "pass.h"

typedef enum { CHAIN_COUNT, CHAIN_SQUARES } chain_kind;

/* v is read once (by the chain): its node may go. */
static bool single_use(const int *uses, const ir_value *v) { return v->def && !v->def->dead && uses[v->id] == 1; }

/* The tensor whose squares' sum v is (x for reduce_sum(square(cast f64 x))
 * over all axes, or square(cast f64 x) of a scalar x; the cast is absent
 * for f64 x), else NULL. The nodes that go with it into dead[0..*nd). */
static ir_value *squares_of(const int *uses, ir_value *v, ir_node **dead, int *nd) {
  if (v->type.dtype != IR_DT_F64 || v->type.rank != 0 || !single_use(uses, v)) return NULL;
  ir_node *n = v->def;
  *nd = 0;
  if (n->op == IR_OP_REDUCE_SUM) {
    ir_value *s = n->in[0];
    if (ir_node_attr_int(n, "keepdims", 0) || !single_use(uses, s)) return NULL; /* rank 0: every axis reduced */
    dead[(*nd)++] = n;
    n = s->def;
  }
  if (n->op != IR_OP_SQUARE || n->out[0]->type.dtype != IR_DT_F64) return NULL;
  dead[(*nd)++] = n;
  ir_value *x = n->in[0];
  if (x->def && !x->def->dead && x->def->op == IR_OP_CAST && single_use(uses, x) &&
      ir_dtype_is_float(x->def->in[0]->type.dtype)) {
    dead[(*nd)++] = x->def;
    x = x->def->in[0];
  } else if (x->type.dtype != IR_DT_F64) {
    return NULL;
  }
  return x;
}

/* The chain's leaf v as operands of the merged node (appended to ops), or false. */
static bool take_leaf(const int *uses, chain_kind kind, ir_value *v, ir_value **ops, int *nops, ir_node **dead,
                      int *nd) {
  if (kind == CHAIN_COUNT) {
    if (v->type.dtype != IR_DT_I64 || !single_use(uses, v) || v->def->op != IR_OP_COUNT_NONFINITE) return false;
    for (int i = 0; i < v->def->n_in; i++) ops[(*nops)++] = v->def->in[i];
    dead[(*nd)++] = v->def;
    return true;
  }
  int k = 0;
  ir_value *x = squares_of(uses, v, dead + *nd, &k);
  if (!x) return false;
  ops[(*nops)++] = x;
  *nd += k;
  return true;
}

/* Merges the chain whose top is the add node top; 1 when it did, 0 when it
 * does not match, -1 when out of memory. */
static int merge_chain(ir_graph *g, const int *uses, ir_node *top) {
  ir_value *r = top->out[0];
  chain_kind kind = r->type.dtype == IR_DT_I64 ? CHAIN_COUNT : CHAIN_SQUARES;
  /* the spine: top, its left operand's add, ... down to the first add */
  int n_spine = 0;
  for (ir_node *a = top;; a = a->in[0]->def) {
    n_spine++;
    ir_value *l = a->in[0];
    if (!l->def || l->def->dead || l->def->op != IR_OP_ADD || !ir_type_equal(&l->type, &r->type) ||
        !single_use(uses, l))
      break;
  }
  ir_node **spine = malloc(sizeof *spine * (size_t)n_spine); /* spine[0]: the bottom add */
  int cap = 0;
  for (int i = 0; i < g->n_nodes; i++) cap += g->nodes[i]->n_in;
  ir_value **ops = malloc(sizeof *ops * (size_t)(cap + 1));
  ir_node **dead = malloc(sizeof *dead * (size_t)(3 * (n_spine + 1) + n_spine));
  if (!spine || !ops || !dead) {
    free(spine), free(ops), free(dead);
    return -1;
  }
  int k = n_spine;
  for (ir_node *a = top; k > 0; a = a->in[0]->def) spine[--k] = a;
  /* leaves: bottom's two operands, then each spine add's right operand */
  int nops = 0, nd = 0, merged = 0; /* merged: spine adds whose whole sum is merged */
  if (take_leaf(uses, kind, spine[0]->in[0], ops, &nops, dead, &nd))
    while (merged < n_spine && take_leaf(uses, kind, spine[merged]->in[1], ops, &nops, dead, &nd)) merged++;
  int rc = 0;
  if (merged > 0) {
    ir_node *last = spine[merged - 1]; /* its result is the merged sum */
    ir_op op = kind == CHAIN_COUNT ? IR_OP_COUNT_NONFINITE : IR_OP_SUM_SQUARES;
    ir_node *m = ir_graph_add_node(g, op, ops, nops, &r->type, 1, NULL, 0, NULL, last->loc);
    m->layer = last->layer;
    for (int i = 0; i < merged - 1; i++) spine[i]->dead = true;
    for (int i = 0; i < nd; i++) dead[i]->dead = true;
    ir_replace_all_uses(g, last->out[0], m->out[0]);
    last->dead = true;
    ir_graph_take_place(g, m, last);
    rc = 1;
  }
  free(spine), free(ops), free(dead);
  return rc;
}

int pass_fuse_multi_tensor(ir_graph *g) {
  int bound = 0;
  int *uses = ir_use_counts(g, &bound);
  if (!uses) return -1;
  int rc = 0;
  for (int i = g->n_nodes - 1; i >= 0 && rc >= 0; i--) {
    ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_ADD || n->out[0]->type.rank != 0) continue;
    ir_dtype dt = n->out[0]->type.dtype;
    if ((dt != IR_DT_I64 && dt != IR_DT_F64) || !ir_type_equal(&n->in[0]->type, &n->in[1]->type) ||
        !ir_type_equal(&n->in[0]->type, &n->out[0]->type))
      continue;
    /* a chain's top: its result is not the left operand of a further add of the chain */
    ir_node *reader = NULL;
    if (uses[n->out[0]->id] == 1 && ir_graph_readers(g, n->out[0], &reader, 1) == 1 && reader->op == IR_OP_ADD &&
        reader->in[0] == n->out[0] && ir_type_equal(&reader->out[0]->type, &n->out[0]->type))
      continue;
    int r = merge_chain(g, uses, n);
    if (r < 0) rc = -1;
    if (r > 0) { /* the merged nodes' operands lost their uses: recount */
      free(uses);
      if (!(uses = ir_use_counts(g, &bound))) return -1;
    }
  }
  free(uses);
  return rc;
}
