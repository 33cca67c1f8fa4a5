/* passes/fuse_elementwise.c — the fuse-elementwise pass: fewer kernels and
 * fewer trips through memory, with results unchanged bit for bit.
 *
 * requires: a verified graph (it runs last in the default pipeline, after
 *           autodiff, canonicalize and checkpoint, so recompute clones fuse
 *           too); invalidates: node order (ids are renumbered), nothing else:
 *           every value that stays keeps its name, role and location.
 *
 * Rewrites, in this order:
 *  0. multi-tensor reductions (fuse_multi_tensor.c): a sum of per-tensor
 *     count_nonfinite, or of per-tensor sums of squares (the optimizer's
 *     finiteness check and gradient norm), becomes one count_nonfinite or
 *     sum_squares over all the tensors.
 *  1. add_layernorm: layernorm(s = add(x, r)) with x, r and s of one float
 *     type becomes one add_layernorm (x, r, gamma, beta) -> (s, y); s keeps
 *     its other uses (the residual stream and the backward read it).
 *  2. elementwise groups: walking the nodes from the last to the first, an
 *     elementwise node (unary, binary, where) that is not yet in a group
 *     roots a group; an operand joins the group when its node is elementwise
 *     or a broadcast and the value has no other use (not a graph output, not
 *     read twice). A value smaller than the group's result (a broadcast
 *     operand) is then computed once per result element: that recompute is
 *     allowed only for cheap ops (not exp, log, tanh, gelu, sqrt, rsqrt, pow,
 *     ...), else the value stays a separate kernel's result. Scalar constants
 *     are written into the expression as literals whatever their uses (the
 *     constant node is removed once nothing reads it). Everything else is an
 *     operand $0, $1, ... of the fused node (the same value once).
 *     The expr grammar is in ir/expr.c: s-expressions such as
 *       (sub $0 (mul (cast f32 $1) (div $2 (add (sqrt $3) (const f32 1e-08)))))
 *     where every op keeps its dtype, so the kernel rounds each intermediate
 *     exactly as the unfused op would (runtime/cpu/kern_fused.c).
 *     dropout's training form (passes/dropout.c) is a member like an
 *     elementwise op (its x may join; its key and positions are operands):
 *     it becomes (dropout p stream x $key g), g = sum_d pos_d * stride_d.
 *     Every group becomes a fused node, a single op too: the fused kernel
 *     computes f32 arithmetic on vectors of elements and hoists scalar
 *     operands, where the unfused kernels call ir_eval_* per element.
 *  3. fused_matmul: a group with an operand that is a matmul's result used
 *     only there, of the group result's exact type (bias + activation after
 *     a matmul), becomes fused_matmul (a, b, other operands) with the
 *     product as $0: the product is computed into the result and the
 *     epilogue applied in place.
 *  4. several results: a fused node F whose single result X has the shape of
 *     a later fused node P's results and is read by P alone (and maybe
 *     listed as a graph output: an optimizer's new moment, read by the
 *     parameter update) joins P: one node computes X and P's results in
 *     one pass over the elements, P's expressions reading X as #0 (no
 *     recompute), so X is not written and then read back and F's operands
 *     are loaded once. The kernel computes every result of a chunk before
 *     storing any, so results may take over operands' buffers in place.
 *     Adam's m', v' and p' become one kernel per parameter. X stays a
 *     result only when it is a graph output; else nothing else reads it,
 *     and it becomes a shared subexpression of the joined node, computed
 *     once and never stored: "%0 = (sigmoid $0); (mul ... %0 ... %0)" for
 *     SwiGLU's backward, which reads sigmoid(gate) twice.
 *  5. counts folded (fuse_multi_tensor.c): a count_nonfinite operand that
 *     a fused node stores (the update's new parameter) is counted by that
 *     node as it stores it: {nonfinite = [r]} and an i64[] result, which
 *     the count adds instead of reading the tensor again.
 * Limits: 64 ops and 32 operands per group (a larger chain becomes several);
 * IR_FUSED_MAX_RESULTS results per fused node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"

enum { MAX_GROUP_OPS = 64, MAX_LEAVES = 32 };

typedef struct {
  ir_graph *g;
  int *uses;        /* by value id: operand uses + graph output uses */
  int *is_output;   /* by value id: times listed as a graph output */
  int *stamp;       /* by node id: the group being built that holds the node */
  int cap_values, cap_nodes;
  int serial;       /* current group stamp */
} fuse_ctx;

typedef struct {
  ir_node *root;
  int64_t numel;              /* of the root's result */
  bool allow_broadcast;       /* absorb broadcast nodes */
  ir_node *members[MAX_GROUP_OPS];
  int n_members;
  ir_value *leaves[MAX_LEAVES];
  int n_leaves;
  ir_value *mm;               /* the matmul result taken as $0, or NULL */
  ir_expr_builder *expr;      /* the expr being built */
  bool oom;
} group;

static int grow(fuse_ctx *c) {
  if (c->g->n_values > c->cap_values) {
    int cap = c->g->n_values * 2 + 16;
    int *u = realloc(c->uses, (size_t)cap * sizeof *u);
    if (!u) return -1;
    c->uses = u;
    int *o = realloc(c->is_output, (size_t)cap * sizeof *o);
    if (!o) return -1;
    c->is_output = o;
    for (int i = c->cap_values; i < cap; i++) c->uses[i] = 0, c->is_output[i] = 0;
    c->cap_values = cap;
  }
  if (c->g->n_nodes > c->cap_nodes) {
    int cap = c->g->n_nodes * 2 + 16;
    int *s = realloc(c->stamp, (size_t)cap * sizeof *s);
    if (!s) return -1;
    c->stamp = s;
    for (int i = c->cap_nodes; i < cap; i++) c->stamp[i] = 0;
    c->cap_nodes = cap;
  }
  return 0;
}

static void count_uses(fuse_ctx *c) {
  ir_graph *g = c->g;
  for (int i = 0; i < c->cap_values; i++) c->uses[i] = 0, c->is_output[i] = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_in; j++) c->uses[n->in[j]->id]++;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    c->uses[g->outputs[i].value->id]++;
    c->is_output[g->outputs[i].value->id]++;
  }
}

/* Gives node n (appended last, results of the given types) the values
 * olds[] in place of its own fresh results, which go to the dead nodes
 * dead_defs[] instead: the surviving values keep names, roles and ids, and
 * no use needs rewriting. */
static void adopt_results(ir_node *n, ir_value *const *olds, ir_node *const *dead_defs) {
  for (int i = 0; i < n->n_out; i++) {
    ir_value *fresh = n->out[i], *old = olds[i];
    ir_node *d = dead_defs[i];
    d->out[old->def_result] = fresh;
    fresh->def = d;
    fresh->def_result = old->def_result;
    n->out[i] = old;
    old->def = n;
    old->def_result = i;
  }
}

static int index_of(const ir_graph *g, const ir_node *n) {
  return n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n ? n->id : -1;
}

/* ---- 1. add + layernorm ---- */
static int fuse_add_layernorm(fuse_ctx *c) {
  ir_graph *g = c->g;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *ln = g->nodes[i];
    if (ln->dead || ln->op != IR_OP_LAYERNORM) continue;
    ir_value *s = ln->in[0];
    ir_node *add = s->def;
    if (!add || add->dead || add->op != IR_OP_ADD || !ir_dtype_is_float(s->type.dtype)) continue;
    if (!ir_type_equal(&add->in[0]->type, &s->type) || !ir_type_equal(&add->in[1]->type, &s->type)) continue;
    int a = index_of(g, add);
    if (a < 0 || a >= i) continue;
    /* place it at the add when gamma and beta exist there, else at the
     * layernorm when nothing between reads s */
    int pos = a;
    for (int k = 1; k <= 2; k++)
      if (ln->in[k]->def && index_of(g, ln->in[k]->def) > a) pos = i;
    if (pos == i)
      for (int k = a + 1; k < i && pos >= 0; k++)
        for (int j = 0; j < g->nodes[k]->n_in; j++)
          if (g->nodes[k]->in[j] == s && !g->nodes[k]->dead) pos = -1;
    if (pos < 0) continue;
    ir_value *in[4] = {add->in[0], add->in[1], ln->in[1], ln->in[2]};
    ir_type types[2] = {s->type, ln->out[0]->type};
    const ir_attr *eps = ir_node_attr(ln, "eps");
    if (!eps) continue;
    ir_node *n = ir_graph_add_node(g, IR_OP_ADD_LAYERNORM, in, 4, types, 2, eps, 1, NULL, add->loc);
    n->layer = add->layer;
    ir_value *olds[2] = {s, ln->out[0]};
    ir_node *defs[2] = {add, ln};
    adopt_results(n, olds, defs);
    add->dead = ln->dead = true;
    ir_graph_take_place(g, n, pos == a ? add : ln); /* O(1): no node after it moves */
  }
  return grow(c);
}

/* ---- 2. elementwise groups ---- */

/* Ops worth recomputing per element of a larger result (cheap arithmetic,
 * selects, comparisons, casts): IR_OPF_CHEAP in ops.def. */
static bool cheap_op(ir_op op) { return ir_op_has(op, IR_OPF_CHEAP); }

static bool is_scalar_const(const ir_value *v) {
  return v->def && !v->def->dead && v->def->op == IR_OP_CONST && v->type.rank == 0;
}

static bool in_group(const fuse_ctx *c, const ir_node *n) { return n && c->stamp[n->id] == c->serial; }

/* dropout's training form (passes/dropout.c): fused as the expr's
 * (dropout p stream x $key g), its positions and strides written as
 * g = sum_d pos_d * stride_d, so the mask is the unfused one bit for bit. */
static bool is_keyed_dropout(const ir_node *n) {
  const ir_attr *strides = n->op == IR_OP_DROPOUT && n->n_in > 1 ? ir_node_attr(n, "strides") : NULL;
  return strides && strides->kind == IR_ATTR_INTS && strides->n == n->n_in - 2;
}

/* Whether node n can be a member of a group (or root one). */
static bool fusable(const ir_node *n) { return ir_op_is_elementwise(n->op) || is_keyed_dropout(n); }

/* Decides which producers join the group (marking them), and collects leaves. */
static void collect(fuse_ctx *c, group *gr, ir_node *n) {
  for (int j = 0; j < n->n_in; j++) {
    ir_value *v = n->in[j];
    ir_node *p = v->def;
    if (is_scalar_const(v)) continue; /* a literal */
    bool join = p && !p->dead && !(is_keyed_dropout(n) && j > 0) /* its key and positions: operands */ && !in_group(c, p) && c->uses[v->id] == 1 && !c->is_output[v->id] &&
                gr->n_members < MAX_GROUP_OPS &&
                (fusable(p) || (p->op == IR_OP_BROADCAST && gr->allow_broadcast)) &&
                (ir_type_numel(&v->type) == gr->numel || cheap_op(p->op));
    if (join) {
      c->stamp[p->id] = c->serial;
      gr->members[gr->n_members++] = p;
      collect(c, gr, p);
      continue;
    }
    int k = 0;
    while (k < gr->n_leaves && gr->leaves[k] != v) k++;
    if (k == gr->n_leaves) {
      if (gr->n_leaves == MAX_LEAVES) {
        gr->oom = true; /* too many operands: give up on this group */
        return;
      }
      gr->leaves[gr->n_leaves++] = v;
    }
  }
}

static int emit(fuse_ctx *c, group *gr, const ir_value *v);

/* (dropout p stream x $key g), g = sum_d pos_d * stride_d (the i64 sum
 * rt_kern_dropout computes, exact below 2^53 elements). */
static int emit_dropout(fuse_ctx *c, group *gr, const ir_node *d, ir_dtype dt) {
  const ir_attr *strides = ir_node_attr(d, "strides");
  int rank = d->n_in - 2;
  int x = emit(c, gr, d->in[0]), key = emit(c, gr, d->in[1]);
  int g = rank > 0 ? 0 : ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_CONST, .op = IR_OP_CONST, .dtype = IR_DT_I64});
  for (int k = 0; k < rank && g >= 0; k++) {
    int pos = emit(c, gr, d->in[2 + k]);
    int stride = ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_CONST, .op = IR_OP_CONST, .dtype = IR_DT_I64,
                                                      .value = (double)strides->ints[k]});
    int term = ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_OP, .op = IR_OP_MUL, .dtype = IR_DT_I64,
                                                    .arg = {pos, stride, -1}});
    g = k == 0 ? term
               : ir_expr_add(gr->expr,
                             (ir_expr_inst){.kind = IR_EXPR_OP, .op = IR_OP_ADD, .dtype = IR_DT_I64, .arg = {g, term, -1}});
  }
  if (x < 0 || key < 0 || g < 0) return -1;
  return ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_OP, .op = IR_OP_DROPOUT, .dtype = dt,
                                              .index = (int)ir_node_attr_int(d, "stream", 0),
                                              .value = ir_node_attr_float(d, "p", 0), .arg = {x, key, g}});
}

/* Adds the expression of value v (an operand inside the group) to the
 * builder; its instruction, or -1 (out of memory). */
static int emit(fuse_ctx *c, group *gr, const ir_value *v) {
  if (is_scalar_const(v) && !(v->def && in_group(c, v->def)))
    return ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_CONST, .op = IR_OP_CONST, .dtype = v->type.dtype,
                                                .value = ir_node_attr_float(v->def, "value", 0)});
  const ir_node *p = v->def;
  if (p && in_group(c, p)) {
    if (p->op == IR_OP_BROADCAST) return emit(c, gr, p->in[0]); /* operands broadcast in the kernel */
    if (is_keyed_dropout(p)) return emit_dropout(c, gr, p, v->type.dtype);
    ir_expr_inst in = {.kind = IR_EXPR_OP, .op = p->op, .dtype = v->type.dtype, .arg = {-1, -1, -1}};
    for (int j = 0; j < p->n_in && j < 3; j++)
      if ((in.arg[j] = emit(c, gr, p->in[j])) < 0) return -1;
    return ir_expr_add(gr->expr, in);
  }
  /* a leaf: $k, the matmul product first for fused_matmul */
  int k = 0;
  if (gr->mm) {
    if (v != gr->mm) {
      k = 1;
      for (int i = 0; i < gr->n_leaves && gr->leaves[i] != v; i++)
        if (gr->leaves[i] != gr->mm) k++;
    }
  } else {
    while (k < gr->n_leaves && gr->leaves[k] != v) k++;
  }
  return ir_expr_add(gr->expr, (ir_expr_inst){.kind = IR_EXPR_OPERAND, .index = k});
}

/* Builds the group rooted at root; 1 if a fused node replaced it, 0 if left
 * alone, -1 out of memory. pos: root's index. */
static int try_group(fuse_ctx *c, ir_node *root, int pos, bool allow_broadcast) {
  ir_graph *g = c->g;
  group gr = {.root = root, .numel = ir_type_numel(&root->out[0]->type), .allow_broadcast = allow_broadcast};
  c->serial++;
  c->stamp[root->id] = c->serial;
  gr.members[gr.n_members++] = root;
  collect(c, &gr, root);
  if (gr.oom) return 0;
  /* a matmul product used only here, of the result's type: the epilogue's $0 */
  for (int i = 0; i < gr.n_leaves && !gr.mm; i++) {
    ir_value *v = gr.leaves[i];
    if (v->def && v->def->op == IR_OP_MATMUL && !v->def->dead && c->uses[v->id] == 1 && !c->is_output[v->id] &&
        ir_type_equal(&v->type, &root->out[0]->type) && v->def->in[0]->type.rank >= 2 &&
        v->def->in[1]->type.rank >= 2)
      gr.mm = v;
  }
  int rc = -1;
  ir_expr *expr = NULL;
  char *text = NULL;
  if (!(gr.expr = ir_expr_builder_new()) || ir_expr_add_result(gr.expr, emit(c, &gr, root->out[0])) != 0 ||
      !(expr = ir_expr_builder_finish(gr.expr)) || !(text = ir_expr_print(expr)))
    goto done;
  rc = 0;
  /* operands: fused (leaves...) or fused_matmul (a, b, leaves but the product...) */
  ir_value *ops[MAX_LEAVES + 2];
  int n_ops = 0;
  ir_op op = IR_OP_FUSED;
  if (gr.mm) {
    op = IR_OP_FUSED_MATMUL;
    ops[n_ops++] = gr.mm->def->in[0];
    ops[n_ops++] = gr.mm->def->in[1];
  }
  for (int i = 0; i < gr.n_leaves; i++)
    if (gr.leaves[i] != gr.mm) ops[n_ops++] = gr.leaves[i];
  ir_type types[MAX_LEAVES + 2], outs[IR_FUSED_MAX_RESULTS];
  for (int i = 0; i < n_ops; i++) types[i] = ops[i]->type;
  /* the expr, and the matmul's transposed reads (transpose_a / transpose_b) */
  static const char *const transpose_keys[2] = {"transpose_a", "transpose_b"};
  ir_attr ex[3] = {ir_attr_expr("expr", expr, text)};
  int n_ex = 1;
  for (int j = 0; gr.mm && j < 2; j++)
    if (ir_node_attr_int(gr.mm->def, transpose_keys[j], 0)) ex[n_ex++] = ir_attr_int(transpose_keys[j], 1);
  int n_out = 0;
  char err[256];
  ir_type out = root->out[0]->type;
  if (ir_infer(op, types, n_ops, ex, n_ex, outs, &n_out, err, sizeof err) != 0 || n_out != 1 ||
      !ir_type_equal(&outs[0], &out)) {
    rc = -2; /* e.g. an absorbed broadcast carried the result's shape: retry without */
    goto done;
  }
  ir_node *n = ir_graph_add_node(g, op, ops, n_ops, &out, 1, ex, n_ex, NULL, root->loc);
  n->layer = root->layer;
  ir_value *old = root->out[0];
  adopt_results(n, &old, &root);
  for (int i = 0; i < gr.n_members; i++) {
    ir_node *m = gr.members[i];
    m->dead = true;
    for (int j = 0; j < m->n_in; j++) c->uses[m->in[j]->id]--;
  }
  if (gr.mm) {
    gr.mm->def->dead = true;
    for (int j = 0; j < 2; j++) c->uses[gr.mm->def->in[j]->id]--;
  }
  for (int i = 0; i < n_ops; i++) c->uses[ops[i]->id]++;
  ir_graph_take_place(g, n, g->nodes[pos]); /* the root's place */
  rc = grow(c) == 0 ? 1 : -1;
done:
  ir_expr_builder_free(gr.expr);
  ir_expr_free(expr);
  free(text);
  return rc;
}

/* ---- 2a. widening casts of inputs, one per reader ----
 * A widening float cast (bf16 / f16 -> f32 / f64: exact) of a graph input
 * or parameter, read by several elementwise nodes, would root a group of
 * its own (a value read twice joins no group) and write the wide copy for
 * them to read back: mixed precision's gradients, read by the optimizer's
 * m' and v'. Each elementwise reader gets a cast of its own instead, which
 * its group absorbs: every group loads the narrow input and widens it in
 * the kernel, and step 4 loads it once for the joined results. Readers of
 * other kinds and graph outputs keep the original. */
static bool widening_input_cast(const ir_node *n) {
  if (n->dead || n->op != IR_OP_CAST || n->n_in != 1 || n->in[0]->def) return false;
  ir_dtype from = n->in[0]->type.dtype, to = n->out[0]->type.dtype;
  return (from == IR_DT_BF16 || from == IR_DT_F16) && (to == IR_DT_F32 || to == IR_DT_F64);
}

static void split_widening_casts(ir_graph *g) {
  enum { MAX_READERS = 16 };
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i], *readers[MAX_READERS];
    if (!widening_input_cast(n)) continue;
    ir_value *v = n->out[0];
    int nr = ir_graph_readers(g, v, readers, MAX_READERS);
    /* the original stays with an output or a reader of another kind, else with the first reader */
    bool taken = ir_graph_is_output(g, v) || nr < 0;
    for (int r = 0; r < nr && !taken; r++) taken = !fusable(readers[r]);
    int made = 0;
    for (int r = 0; r < nr; r++) {
      if (!fusable(readers[r])) continue;
      if (!taken) {
        taken = true;
        continue;
      }
      ir_value *w = ir_graph_build1(g, IR_OP_CAST, n->in, 1, n->attrs, n->n_attrs, NULL, n->loc);
      w->def->layer = n->layer;
      for (int j = 0; j < readers[r]->n_in; j++)
        if (readers[r]->in[j] == v) readers[r]->in[j] = w;
      made++;
    }
    ir_graph_move_tail(g, made, i + 1); /* after the original, before every reader */
    i += made;
  }
}

static int fuse_groups(fuse_ctx *c) {
  ir_graph *g = c->g;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    ir_node *n = g->nodes[i];
    if (n->dead || !fusable(n)) continue;
    int rc = try_group(c, n, i, true);
    if (rc == -2) rc = try_group(c, n, i, false);
    if (rc == -1) return -1;
  }
  return 0;
}

/* ---- 4. several results ---- */

static bool same_shape(const ir_type *a, const ir_type *b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* The operand of fused node p that can join it (step 4), or -1. */
static int joinable_operand(fuse_ctx *c, const ir_node *p) {
  if (p->n_out >= IR_FUSED_MAX_RESULTS) return -1;
  for (int j = 0; j < p->n_in; j++) {
    const ir_value *x = p->in[j];
    const ir_node *f = x->def;
    if (!f || f->dead || f->op != IR_OP_FUSED || f->n_out != 1 || !same_shape(&x->type, &p->out[0]->type)) continue;
    int readers = c->uses[x->id] - c->is_output[x->id]; /* not a scan of the outputs: they can be many */
    for (int i = 0; i < p->n_in; i++) readers -= p->in[i] == x;
    if (readers != 0) continue;
    int n_ops = p->n_in - 1 + f->n_in; /* at most: shared operands count once */
    if (n_ops > MAX_LEAVES) continue;
    return j;
  }
  return -1;
}

/* Joins f (the definer of p's operand xi) into p: one node with results
 * (x, p's results...) at p's place. 1 done, 0 not possible, -1 out of memory. */
static int join_results(fuse_ctx *c, ir_node *p, int xi, int pos) {
  ir_graph *g = c->g;
  ir_value *x = p->in[xi];
  ir_node *f = x->def;
  ir_value *ops[2 * MAX_LEAVES];
  int n_ops = 0, fmap[MAX_LEAVES * 2], pmap[MAX_LEAVES * 2];
  for (int j = 0; j < f->n_in; j++) {
    int k = 0;
    while (k < n_ops && ops[k] != f->in[j]) k++;
    if (k == n_ops) ops[n_ops++] = f->in[j];
    fmap[j] = k;
  }
  for (int j = 0; j < p->n_in; j++) {
    if (p->in[j] == x) {
      pmap[j] = -1;
      continue;
    }
    int k = 0;
    while (k < n_ops && ops[k] != p->in[j]) k++;
    if (k == n_ops) ops[n_ops++] = p->in[j];
    pmap[j] = k;
  }
  const ir_attr *fe = ir_node_attr(f, "expr"), *pe = ir_node_attr(p, "expr");
  if (!fe || !pe || !fe->expr || !pe->expr || n_ops > MAX_LEAVES) return 0;
  /* f's expression is result #0; p's read it as #0 and their own results
   * shift by one. When x is no graph output, nothing but p reads it: it
   * stops being a result (no store, no buffer), p's expressions reading
   * f's root instruction itself, a shared subexpression (%N). */
  bool keep_x = c->is_output[x->id] > 0;
  ir_expr_builder *b = ir_expr_builder_new();
  ir_expr *expr = NULL;
  char *text = NULL;
  if (!b || ir_expr_append(b, fe->expr, fmap, 0) != 0 || ir_expr_append(b, pe->expr, pmap, 1) != 0 ||
      (!keep_x && ir_expr_builder_unresult(b, 0) != 0) || !(expr = ir_expr_builder_finish(b)) ||
      !(text = ir_expr_print(expr))) {
    ir_expr_builder_free(b);
    ir_expr_free(expr);
    return -1;
  }
  ir_expr_builder_free(b);
  ir_type types[2 * MAX_LEAVES], outs[IR_FUSED_MAX_RESULTS];
  for (int i = 0; i < n_ops; i++) types[i] = ops[i]->type;
  ir_attr ex = ir_attr_expr("expr", expr, text);
  int n_out = 0;
  char err[256];
  int first = keep_x ? 1 : 0; /* p's first result among the joined node's */
  bool ok = ir_infer(IR_OP_FUSED, types, n_ops, &ex, 1, outs, &n_out, err, sizeof err) == 0 &&
            n_out == p->n_out + first && (!keep_x || ir_type_equal(&outs[0], &x->type));
  for (int i = 0; ok && i < p->n_out; i++) ok = ir_type_equal(&outs[i + first], &p->out[i]->type);
  if (!ok) {
    ir_expr_free(expr);
    free(text);
    return 0;
  }
  ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, ops, n_ops, outs, n_out, &ex, 1, NULL, p->loc);
  ir_expr_free(expr);
  free(text);
  n->layer = p->layer;
  ir_value *olds[IR_FUSED_MAX_RESULTS];
  ir_node *defs[IR_FUSED_MAX_RESULTS];
  if (keep_x) olds[0] = x, defs[0] = f;
  for (int i = 0; i < p->n_out; i++) olds[i + first] = p->out[i], defs[i + first] = p;
  adopt_results(n, olds, defs);
  f->dead = p->dead = true;
  for (int j = 0; j < f->n_in; j++) c->uses[f->in[j]->id]--;
  for (int j = 0; j < p->n_in; j++) c->uses[p->in[j]->id]--;
  for (int j = 0; j < n_ops; j++) c->uses[ops[j]->id]++;
  ir_graph_take_place(g, n, g->nodes[pos]); /* p's place */
  return grow(c) == 0 ? 1 : -1;
}

static int fuse_results(fuse_ctx *c) {
  ir_graph *g = c->g;
  count_uses(c);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *p = g->nodes[i];
    if (p->dead || p->op != IR_OP_FUSED) continue;
    int xi;
    while ((xi = joinable_operand(c, p)) >= 0) {
      int rc = join_results(c, p, xi, i);
      if (rc < 0) return -1;
      if (rc == 0) break;
      p = g->nodes[i]; /* the joined node, at p's place */
    }
  }
  return 0;
}

/* ---- 4a. a copy of a result in another dtype, in its pass ----
 * A fused node P that casts X, a graph output computed by an earlier fused
 * node F, to a graph output of X's shape (mixed precision's bf16 copy of a
 * new parameter, in the optimizer update) becomes one more result of F:
 * computed from X's register in the pass that computes X, P's expression
 * reading #k for its $0, so X is not read back. X is stored as before.
 * F may hold several results already (step 4's m', v', p'), which step 4
 * does not join into. 1 joined, 0 not, -1 out of memory. */
static int join_copy(fuse_ctx *c, ir_node *p) {
  ir_graph *g = c->g;
  ir_value *x = p->in[0];
  ir_node *f = x->def;
  int fpos = index_of(g, f);
  const ir_attr *fe = ir_node_attr(f, "expr"), *pe = ir_node_attr(p, "expr");
  if (fpos < 0 || !fe || !pe || !fe->expr || !pe->expr) return 0;
  ir_expr_builder *b = ir_expr_builder_new();
  int fmap[MAX_LEAVES * 2], map[MAX_GROUP_OPS * 4];
  for (int j = 0; j < f->n_in && j < MAX_LEAVES * 2; j++) fmap[j] = j;
  const ir_expr *e = pe->expr;
  bool ok = b && f->n_in <= MAX_LEAVES * 2 && e->n_ins <= (int)(sizeof map / sizeof map[0]) && e->n_results == 1 &&
            ir_expr_append(b, fe->expr, fmap, 0) == 0;
  for (int i = 0; ok && i < e->n_ins; i++) { /* p's instructions, $0 read as #k */
    ir_expr_inst in = e->ins[i];
    if (in.kind == IR_EXPR_OPERAND) in = (ir_expr_inst){.kind = IR_EXPR_RESULT, .index = x->def_result, .arg = {-1, -1, -1}};
    else if (in.kind == IR_EXPR_RESULT) ok = false;
    for (int k = 0; ok && in.kind == IR_EXPR_OP && k < ir_expr_arity(&in); k++) in.arg[k] = map[in.arg[k]];
    ok = ok && (map[i] = ir_expr_add(b, in)) >= 0;
  }
  ir_expr *expr = ok && ir_expr_add_result(b, map[e->results[0]]) == 0 ? ir_expr_builder_finish(b) : NULL;
  ir_expr_builder_free(b);
  char *text = expr ? ir_expr_print(expr) : NULL;
  if (!text) {
    ir_expr_free(expr);
    return ok ? -1 : 0;
  }
  ir_type types[MAX_LEAVES * 2], outs[IR_FUSED_MAX_RESULTS];
  for (int i = 0; i < f->n_in; i++) types[i] = f->in[i]->type;
  ir_attr ex = ir_attr_expr("expr", expr, text);
  int n_out = 0;
  char err[256];
  ok = ir_infer(IR_OP_FUSED, types, f->n_in, &ex, 1, outs, &n_out, err, sizeof err) == 0 && n_out == f->n_out + 1 &&
       ir_type_equal(&outs[f->n_out], &p->out[0]->type);
  for (int i = 0; ok && i < f->n_out; i++) ok = ir_type_equal(&outs[i], &f->out[i]->type);
  ir_node *n = ok ? ir_graph_add_node(g, IR_OP_FUSED, f->in, f->n_in, outs, n_out, &ex, 1, NULL, f->loc) : NULL;
  ir_expr_free(expr);
  free(text);
  if (!n) return 0;
  n->layer = f->layer;
  ir_value *olds[IR_FUSED_MAX_RESULTS];
  ir_node *defs[IR_FUSED_MAX_RESULTS];
  for (int i = 0; i < f->n_out; i++) olds[i] = f->out[i], defs[i] = f;
  olds[f->n_out] = p->out[0], defs[f->n_out] = p;
  adopt_results(n, olds, defs);
  f->dead = p->dead = true;
  c->uses[x->id]--;
  ir_graph_take_place(g, n, g->nodes[fpos]); /* f's place: p read nothing else */
  return grow(c) == 0 ? 1 : -1;
}

static int join_copies(fuse_ctx *c) {
  ir_graph *g = c->g;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *p = g->nodes[i], *f = p->n_in == 1 ? p->in[0]->def : NULL;
    const ir_attr *pe = p->dead || p->op != IR_OP_FUSED ? NULL : ir_node_attr(p, "expr");
    if (!pe || !pe->expr || pe->expr->n_ins != 2 || pe->expr->ins[1].kind != IR_EXPR_OP ||
        pe->expr->ins[1].op != IR_OP_CAST || p->n_out != 1 || !f || f->dead || f->op != IR_OP_FUSED ||
        f->n_out >= IR_FUSED_MAX_RESULTS || !c->is_output[p->in[0]->id] || !c->is_output[p->out[0]->id] ||
        !same_shape(&p->in[0]->type, &p->out[0]->type) || !same_shape(&f->out[0]->type, &p->out[0]->type))
      continue;
    if (join_copy(c, p) < 0) return -1;
  }
  return 0;
}

/* Constant nodes whose every reader was fused. */
static void drop_unused_consts(fuse_ctx *c) {
  count_uses(c);
  for (int i = 0; i < c->g->n_nodes; i++) {
    ir_node *n = c->g->nodes[i];
    if (!n->dead && n->op == IR_OP_CONST && c->uses[n->out[0]->id] == 0) n->dead = true;
  }
}

int pass_fuse_elementwise(ir_graph *g, const pass_options *o) {
  fuse_ctx c = {.g = g};
  int rc = -1;
  if (pass_fuse_multi_tensor(g) != 0) goto done;
  ir_graph_compact(g);
  if (grow(&c) != 0) goto done;
  count_uses(&c);
  if (fuse_add_layernorm(&c) != 0) goto done;
  split_widening_casts(g);
  if (grow(&c) != 0) goto done;
  count_uses(&c);
  if (fuse_groups(&c) != 0) goto done;
  if (fuse_results(&c) != 0) goto done;
  if (join_copies(&c) != 0) goto done;
  if (pass_fold_counts(g) != 0) goto done;
  drop_unused_consts(&c);
  ir_graph_compact(g);
  rc = 0;
done:
  if (rc != 0) ir_error_plain(o->diag, "fuse-elementwise: out of memory");
  free(c.uses);
  free(c.is_output);
  free(c.stamp);
  return rc;
}
