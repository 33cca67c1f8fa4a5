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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the count folded into the kernels that store what it counts ----
 * A count_nonfinite operand that is a float result r of a fused node F (the
 * optimizer update's new parameter, just stored) is counted by F itself:
 * F gets {nonfinite = [r...]} and one more result, i64[], its results'
 * Inf / NaN elements, counted chunk by chunk as they are stored; the count
 * adds that i64[] in place of reading the tensor again. The count is the
 * same: the value it read is the one F stored (SSA), and integers add in
 * any order. F's results of one count are counted together (one i64[]); an
 * F already counting, without room for another result, or whose result
 * the count reads twice is left alone, and so is one that broadcasts an
 * operand (the kernels count in a plain pass over the elements). */

/* F's results the count n reads (bit r), or 0 where F cannot count them. */
static unsigned foldable(const ir_node *n, const ir_node *f) {
  if (!f || f->dead || f->op != IR_OP_FUSED || f->n_out >= IR_FUSED_MAX_RESULTS || ir_fused_counts(f) ||
      f->n_attrs >= 8)
    return 0;
  const ir_type *o = &f->out[0]->type; /* a plain pass over the elements: operands of that shape or one element */
  for (int i = 0; i < f->n_in; i++) {
    const ir_type *t = &f->in[i]->type;
    if (ir_type_numel(t) != 1 && (t->rank != o->rank || memcmp(t->dims, o->dims, sizeof(int64_t) * (size_t)o->rank)))
      return 0;
  }
  unsigned mask = 0;
  for (int j = 0; j < n->n_in; j++) {
    const ir_value *v = n->in[j];
    if (v->def != f) continue;
    if (!ir_dtype_is_float(v->type.dtype) || (mask >> v->def_result & 1)) return 0;
    mask |= 1u << v->def_result;
  }
  return mask;
}

/* F with {nonfinite = results of mask} at F's place, its values kept; its
 * count value, or NULL out of memory. */
static ir_value *counting_node(ir_graph *g, ir_node *f, unsigned mask) {
  ir_type types[IR_FUSED_MAX_RESULTS];
  int64_t which[IR_FUSED_MAX_RESULTS];
  int nw = 0;
  for (int r = 0; r < f->n_out; r++) {
    types[r] = f->out[r]->type;
    if (mask >> r & 1) which[nw++] = r;
  }
  types[f->n_out] = (ir_type){.dtype = IR_DT_I64, .rank = 0};
  ir_attr attrs[8];
  int na = 0;
  for (int i = 0; i < f->n_attrs; i++) attrs[na++] = f->attrs[i]; /* (at most 7: foldable) */
  attrs[na++] = ir_attr_ints("nonfinite", which, nw);
  char name[256];
  snprintf(name, sizeof name, "%s.nonfinite", f->out[which[nw - 1]]->name ? f->out[which[nw - 1]]->name : "count");
  const char *names[IR_FUSED_MAX_RESULTS] = {NULL};
  names[f->n_out] = name;
  ir_node *m = ir_graph_add_node(g, IR_OP_FUSED, f->in, f->n_in, types, f->n_out + 1, attrs, na, names, f->loc);
  if (!m) return NULL;
  m->layer = f->layer;
  for (int r = 0; r < f->n_out; r++) { /* m takes f's values; f, dead, m's fresh ones */
    ir_value *fresh = m->out[r], *old = f->out[r];
    f->out[r] = fresh, fresh->def = f;
    m->out[r] = old, old->def = m;
  }
  f->dead = true;
  ir_graph_take_place(g, m, f);
  return m->out[m->n_out - 1];
}

int pass_fold_counts(ir_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_COUNT_NONFINITE) continue;
    int nin = n->n_in, nops = 0, folded = 0;
    ir_value **ops = malloc((size_t)nin * sizeof *ops);
    unsigned *masks = malloc((size_t)nin * sizeof *masks);
    if (!ops || !masks) {
      free(ops), free(masks);
      return -1;
    }
    for (int j = 0; j < nin; j++) masks[j] = foldable(n, n->in[j]->def); /* before any node is replaced */
    for (int j = 0; j < nin; j++) {
      ir_value *v = n->in[j];
      if (!masks[j]) {
        ops[nops++] = v;
        continue;
      }
      if (v->def_result != __builtin_ctz(masks[j])) continue; /* F's first counted result brings F's count */
      ir_value *c = counting_node(g, v->def, masks[j]);
      if (!c) {
        free(ops), free(masks);
        return -1;
      }
      ops[nops++] = c;
      folded++;
    }
    if (folded) {
      ir_node *m = ir_graph_add_node(g, IR_OP_COUNT_NONFINITE, ops, nops, &n->out[0]->type, 1, NULL, 0, NULL, n->loc);
      if (!m) {
        free(ops), free(masks);
        return -1;
      }
      m->layer = n->layer;
      ir_value *fresh = m->out[0], *old = n->out[0];
      n->out[0] = fresh, fresh->def = n;
      m->out[0] = old, old->def = m;
      n->dead = true;
      ir_graph_take_place(g, m, n);
    }
    free(ops), free(masks);
  }
  return 0;
}
