/* passes/jvp.c — forward mode: a JVP rule per op and pass_jvp, which
 * appends nodes computing the tangents of chosen values.
 *
 * requires: a verified graph in topological order.
 * invalidates: nothing — it only appends nodes.
 *
 * Tangents start at the wrt values and flow forward, node by node, through
 * the nodes the requested values depend on. A rule gets the tangents of the
 * operands (NULL = zero) and builds the tangent of each float result (named
 * t_<result>, role grad, at the forward node's location and layer). Every
 * rule is linear in the tangents; elementwise and binary ops share their
 * derivative code with reverse mode (autodiff_build.c). Ops with no rule
 * have an explicit reason; a tangent reaching one whose result is a float is
 * an error, while comparisons and integer casts simply end the flow.
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "autodiff_impl.h"

typedef void (*jvp_fn)(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty);
typedef struct {
  jvp_fn fn;
  const char *nondiff;
} jvp_rule;

#define TN(j) (c->dn[j])

static void jvp_unary(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ty[0] = ad_unary_apply(c, tx[0], TN(0));
}

static void jvp_cast(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ty[0] = ad_cast(c, tx[0], n->out[0]->type.dtype, TN(0));
}

static void jvp_binary(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *p[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++)
    if (tx[i]) p[i] = ad_binary_apply(c, i, tx[i], NULL);
  ty[0] = ad_fit(c, ad_add(c, p[0], p[1], NULL), &n->out[0]->type, TN(0));
}

static void jvp_where(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *zero = ad_scalar(c, n->out[0]->type.dtype, 0);
  ir_value *w = ad_where(c, n->in[0], tx[1] ? tx[1] : zero, tx[2] ? tx[2] : zero, NULL);
  ty[0] = ad_fit(c, w, &n->out[0]->type, TN(0));
}

/* bilinear: t_a @ b + a @ t_b, each product reading its operands as n does
 * (n's attributes: transpose_a / transpose_b) */
static void jvp_matmul(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *p[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++)
    if (tx[i]) {
      ir_value *in[2] = {i == 0 ? tx[0] : n->in[0], i == 1 ? tx[1] : n->in[1]};
      p[i] = ad_op(c, IR_OP_MATMUL, in, 2, n->attrs, n->n_attrs, NULL);
    }
  ty[0] = ad_fit(c, ad_add(c, p[0], p[1], NULL), &n->out[0]->type, TN(0));
}

/* Linear ops: the same op (same attributes) applied to the one tangent. */
static void jvp_same(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *in[3];
  for (int i = 0; i < n->n_in && i < 3; i++) in[i] = tx[i] ? tx[i] : n->in[i];
  ty[0] = ad_op(c, n->op, in, n->n_in, n->attrs, n->n_attrs, TN(0));
}

static void jvp_causal_mask(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_attr a = ir_attr_float("fill", 0.0);
  ty[0] = ad_op(c, IR_OP_CAUSAL_MASK, tx, 1, &a, 1, TN(0));
}

/* dropout: the same mask over the tangent (vjp.c's rule, forward). */
static void jvp_dropout(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *in[2 + IR_MAX_RANK];
  in[0] = tx[0];
  for (int i = 1; i < n->n_in; i++) in[i] = n->in[i];
  ty[0] = ad_op(c, IR_OP_DROPOUT, in, n->n_in, n->attrs, n->n_attrs, TN(0));
}

static void jvp_concat(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value **in = malloc((size_t)n->n_in * sizeof *in);
  if (!in) IR_DIE("out of memory (in)");
  for (int i = 0; i < n->n_in; i++) in[i] = tx[i] ? tx[i] : ad_fill(c, &n->in[i]->type, 0, NULL);
  ty[0] = ad_op(c, IR_OP_CONCAT, in, n->n_in, n->attrs, n->n_attrs, TN(0));
  free(in);
}

static void jvp_split(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ad_op_multi(c, IR_OP_SPLIT, tx, 1, n->attrs, n->n_attrs, c->dn, ty);
}

static void jvp_reduce_max(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *x = n->in[0], *y = n->out[0];
  const ir_attr *axes = ir_node_attr(n, "axes");
  int64_t dims[IR_MAX_RANK];
  for (int d = 0; d < x->type.rank; d++) dims[d] = x->type.dims[d];
  for (int i = 0; i < axes->n; i++) dims[axes->ints[i]] = 1;
  ir_type kt = {.rank = x->type.rank};
  memcpy(kt.dims, dims, sizeof dims);
  ir_value *ykd = ad_same_dims(&y->type, &kt) ? y : ad_reshape(c, y, dims, x->type.rank, NULL);
  ir_value *mask = ad_bin(c, IR_OP_EQ, x, ykd, NULL);
  ir_value *w = ad_where(c, mask, tx[0], ad_scalar(c, x->type.dtype, 0), NULL);
  ty[0] = ad_reduce(c, IR_OP_REDUCE_SUM, w, axes->ints, axes->n, ir_node_attr_int(n, "keepdims", 0), TN(0));
}

static void jvp_softmax(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  int axis = (int)ir_node_attr_int(n, "axis", 0);
  ir_value *y = n->out[0];
  if (n->op == IR_OP_SOFTMAX) {
    ty[0] = ad_softmax_jvp(c, y, tx[0], axis, TN(0));
  } else { /* t - sum(exp(y) * t) */
    ir_value *e = ad_un(c, IR_OP_EXP, y, NULL);
    ty[0] = ad_bin(c, IR_OP_SUB, tx[0], ad_last_sum(c, ad_bin(c, IR_OP_MUL, e, tx[0], NULL), axis), TN(0));
  }
}

static void jvp_norm(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *xhat, *rstd, *r = NULL;
  ad_norm_stats(c, n->op == IR_OP_LAYERNORM, n->in[0], ir_node_attr_float(n, "eps", 1e-5), &xhat, &rstd);
  if (tx[0]) { /* txhat = rstd (t - mean(t) - xhat mean(t xhat)) */
    ir_value *t = tx[0];
    ir_value *m2 = ad_last_mean(c, ad_bin(c, IR_OP_MUL, t, xhat, NULL));
    ir_value *u = ad_bin(c, IR_OP_SUB, t, ad_bin(c, IR_OP_MUL, xhat, m2, NULL), NULL);
    if (n->op == IR_OP_LAYERNORM) u = ad_bin(c, IR_OP_SUB, u, ad_last_mean(c, t), NULL);
    r = ad_bin(c, IR_OP_MUL, ad_bin(c, IR_OP_MUL, rstd, u, NULL), n->in[1], NULL);
  }
  if (tx[1]) r = ad_add(c, r, ad_bin(c, IR_OP_MUL, xhat, tx[1], NULL), NULL);
  if (n->op == IR_OP_LAYERNORM && tx[2]) r = ad_add(c, r, tx[2], NULL);
  ty[0] = ad_fit(c, r, &n->out[0]->type, TN(0));
}

/* Below the rule table: it sweeps with the rules of the primitives. */
static void jvp_norm_grad(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty);

static void jvp_cross_entropy(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *l = n->in[0];
  ir_value *in[3] = {l, n->in[1], ad_scalar(c, l->type.dtype, 1)};
  ir_value *base = ad_op(c, IR_OP_CROSS_ENTROPY_GRAD, in, 3, NULL, 0, NULL);
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < l->type.rank; i++) axes[i] = i;
  ty[0] = ad_reduce(c, IR_OP_REDUCE_SUM, ad_bin(c, IR_OP_MUL, base, tx[0], NULL), axes, l->type.rank, false, TN(0));
}

/* y = (softmax(l) - onehot(t)) * s / P: linear in s, softmax Jacobian in l */
static void jvp_cross_entropy_grad(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *l = n->in[0], *r = NULL;
  int last = l->type.rank - 1;
  if (tx[0]) {
    int64_t P = ir_type_numel(&n->in[1]->type);
    ir_attr a = ir_attr_int("axis", last);
    ir_value *s = ad_op(c, IR_OP_SOFTMAX, &l, 1, &a, 1, NULL);
    ir_value *scale = ad_bin(c, IR_OP_MUL, n->in[2], ad_scalar(c, l->type.dtype, 1.0 / (double)(P ? P : 1)), NULL);
    r = ad_bin(c, IR_OP_MUL, ad_softmax_jvp(c, s, tx[0], last, NULL), scale, NULL);
  }
  if (tx[2]) {
    ir_value *in[3] = {l, n->in[1], tx[2]};
    r = ad_add(c, r, ad_op(c, IR_OP_CROSS_ENTROPY_GRAD, in, 3, NULL, 0, NULL), NULL);
  }
  ty[0] = ad_fit(c, r, &n->out[0]->type, TN(0));
}

static void jvp_einsum(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value **in = malloc((size_t)n->n_in * sizeof *in), *r = NULL;
  if (!in) IR_DIE("out of memory (in)");
  for (int i = 0; i < n->n_in; i++) {
    if (!tx[i]) continue;
    for (int j = 0; j < n->n_in; j++) in[j] = j == i ? tx[i] : n->in[j];
    r = ad_add(c, r, ad_op(c, IR_OP_EINSUM, in, n->n_in, n->attrs, n->n_attrs, NULL), NULL);
  }
  free(in);
  ty[0] = ad_fit(c, r, &n->out[0]->type, TN(0));
}

/* attention (fused by fuse-attention), recomputed through primitives (the
 * tangent is T x S wide, like the unfused graph's):
 *   s = scale q k^T (causally masked);  p = softmax(s);
 *   ts = scale (tq k^T + q tk^T);  tp = p (ts - rowsum(p ts));
 *   to = tp v + p tv;  tlse = rowsum(p ts).
 * Masked entries have p = 0, so ts needs no mask. */
static void jvp_attention(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
  if (n->n_in != 3) IR_DIE("the JVP of attention with a qpos operand (a decode step) is not defined");
  ir_dtype dt = q->type.dtype;
  int r = q->type.rank;
  /* grouped-query: the kv heads (and their tangents) repeated per query head */
  ir_value *tk = tx[1], *tv = tx[2];
  if (r >= 3 && k->type.dims[r - 3] != q->type.dims[r - 3]) {
    int64_t hq = q->type.dims[r - 3];
    k = ad_repeat_kv(c, k, hq), v = ad_repeat_kv(c, v, hq);
    if (tk) tk = ad_repeat_kv(c, tk, hq);
    if (tv) tv = ad_repeat_kv(c, tv, hq);
  }
  ir_value *scale = ad_scalar(c, dt, ir_node_attr_float(n, "scale", 1.0));
  ir_value *kt = ad_swap_last2(c, k);
  ir_value *qk[2] = {q, kt};
  ir_value *s = ad_bin(c, IR_OP_MUL, ad_op(c, IR_OP_MATMUL, qk, 2, NULL, 0, NULL), scale, NULL);
  if (ir_node_attr_int(n, "causal", 0)) s = ad_op(c, IR_OP_CAUSAL_MASK, &s, 1, NULL, 0, NULL);
  ir_attr axis = ir_attr_int("axis", r - 1);
  ir_value *p = ad_op(c, IR_OP_SOFTMAX, &s, 1, &axis, 1, NULL);
  ir_value *ts = NULL;
  if (tx[0]) {
    ir_value *in[2] = {tx[0], kt};
    ts = ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, NULL);
  }
  if (tk) {
    ir_value *in[2] = {q, ad_swap_last2(c, tk)};
    ts = ad_add(c, ts, ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, NULL), NULL);
  }
  ir_value *to = NULL, *tlse = NULL;
  if (ts) {
    ts = ad_bin(c, IR_OP_MUL, ts, scale, NULL);
    ir_value *pts = ad_bin(c, IR_OP_MUL, p, ts, NULL);
    int64_t last = r - 1;
    tlse = ad_reduce(c, IR_OP_REDUCE_SUM, pts, &last, 1, false, NULL);
    ir_value *tp = ad_bin(c, IR_OP_MUL, p, ad_bin(c, IR_OP_SUB, ts, ad_last_sum(c, pts, r - 1), NULL), NULL);
    ir_value *in[2] = {tp, v};
    to = ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, NULL);
  }
  if (tv) {
    ir_value *in[2] = {p, tv};
    to = ad_add(c, to, ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, NULL), NULL);
  }
  ty[0] = to;
  ty[1] = tlse ? ad_cast(c, tlse, n->out[1]->type.dtype, NULL) : NULL;
}

/* Communication: the collectives are linear (jvp_same); a sent value's
 * tangent is sent too, and a received value's tangent received. */
static void jvp_send(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  (void)ty;
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "peer")};
  ad_send(c, tx[0], a, 3);
}

static void jvp_recv(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  (void)tx;
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "peer")};
  ty[0] = ad_recv(c, &n->out[0]->type, a, 3, TN(0));
}

#define RULE(f) {f, NULL}
#define NONDIFF(why) {NULL, why}
#define FUSED_OP "a fused op (the fusion passes make it after autodiff; differentiate the graph before fusing)"
/* Rules of the ops that are not plain elementwise; those take theirs from
 * their kind and flags (jvp_rule_of). */
static const jvp_rule jvp_rules[IR_NUM_OPS] = {
    [IR_OP_CONST] = NONDIFF("a constant"),
    [IR_OP_IOTA] = NONDIFF("an index tensor"),
    [IR_OP_WHERE] = RULE(jvp_where),
    [IR_OP_MATMUL] = RULE(jvp_matmul),
    [IR_OP_TRANSPOSE] = RULE(jvp_same),
    [IR_OP_RESHAPE] = RULE(jvp_same),
    [IR_OP_BROADCAST] = RULE(jvp_same),
    [IR_OP_SLICE] = RULE(jvp_same),
    [IR_OP_CONCAT] = RULE(jvp_concat),
    [IR_OP_SPLIT] = RULE(jvp_split),
    [IR_OP_REDUCE_SUM] = RULE(jvp_same),
    [IR_OP_REDUCE_MEAN] = RULE(jvp_same),
    [IR_OP_REDUCE_MAX] = RULE(jvp_reduce_max),
    [IR_OP_SOFTMAX] = RULE(jvp_softmax),
    [IR_OP_LOG_SOFTMAX] = RULE(jvp_softmax),
    [IR_OP_LAYERNORM] = RULE(jvp_norm),
    [IR_OP_RMSNORM] = RULE(jvp_norm),
    [IR_OP_EMBEDDING] = RULE(jvp_same),      /* table tangent; ids carry none */
    [IR_OP_CROSS_ENTROPY] = RULE(jvp_cross_entropy),
    [IR_OP_CAUSAL_MASK] = RULE(jvp_causal_mask),
    [IR_OP_DROPOUT] = RULE(jvp_dropout),
    [IR_OP_EINSUM] = RULE(jvp_einsum),
    [IR_OP_ARGMAX] = NONDIFF("an index (integer result)"),
    [IR_OP_COUNT_NONFINITE] = NONDIFF("a count (integer result)"),
    [IR_OP_SUM_SQUARES] = NONDIFF("a multi-tensor reduction made after autodiff (fuse-elementwise)"),
    [IR_OP_GRAD] = NONDIFF("a gradient request that is not expanded yet (run the autodiff pass first)"),
    [IR_OP_UNSLICE] = RULE(jvp_same),
    [IR_OP_EMBEDDING_GRAD] = RULE(jvp_same), /* linear in g */
    [IR_OP_CROSS_ENTROPY_GRAD] = RULE(jvp_cross_entropy_grad),
    [IR_OP_FUSED] = NONDIFF(FUSED_OP),
    [IR_OP_FUSED_MATMUL] = NONDIFF(FUSED_OP),
    [IR_OP_ADD_LAYERNORM] = NONDIFF(FUSED_OP),
    [IR_OP_LAYERNORM_GRAD] = RULE(jvp_norm_grad),
    [IR_OP_RMSNORM_GRAD] = RULE(jvp_norm_grad),
    [IR_OP_LINEAR_CROSS_ENTROPY] = NONDIFF(FUSED_OP),
    [IR_OP_ATTENTION] = RULE(jvp_attention),
    [IR_OP_ALL_REDUCE] = RULE(jvp_same),
    [IR_OP_ALL_GATHER] = RULE(jvp_same),
    [IR_OP_REDUCE_SCATTER] = RULE(jvp_same),
    [IR_OP_ALL_TO_ALL] = RULE(jvp_same),
    [IR_OP_COMM_BROADCAST] = RULE(jvp_same),
    [IR_OP_SEND] = RULE(jvp_send),
    [IR_OP_RECV] = RULE(jvp_recv),
    [IR_OP_MESH_SLICE] = RULE(jvp_same),
    [IR_OP_SHARD_HINT] = RULE(jvp_same), /* the tangent laid out as the value */
    [IR_OP_ATTENTION_GRAD] = NONDIFF("the fused attention backward, which is not differentiated again (for second "
                                     "derivatives differentiate the unfused graph: --disable-pass fuse-attention)"),
};

/* The rule of op: elementwise ops share theirs (the derivative of each is in
 * autodiff_build.c); comparisons and logic are not differentiable. */
static jvp_rule jvp_rule_of(ir_op op) {
  if (op == IR_OP_CAST) return (jvp_rule)RULE(jvp_cast);
  ir_op_kind k = ir_op_kind_of(op);
  if (k == IR_OPK_UNARY || k == IR_OPK_BINARY) {
    if (ir_op_has(op, IR_OPF_CMP)) return (jvp_rule)NONDIFF("a comparison");
    if (ir_op_has(op, IR_OPF_BOOL)) return (jvp_rule)NONDIFF("a logical operation");
    return k == IR_OPK_UNARY ? (jvp_rule)RULE(jvp_unary) : (jvp_rule)RULE(jvp_binary);
  }
  return (unsigned)op < IR_NUM_OPS ? jvp_rules[op] : (jvp_rule)NONDIFF("not an op");
}

bool pass_jvp_has_rule(ir_op op, const char **why) {
  jvp_rule r = jvp_rule_of(op);
  *why = r.nondiff;
  return r.fn != NULL;
}

/* One step of the forward sweep: when operands of nd carry tangents (tan,
 * by value id), its rule builds the tangents of its float results. Returns
 * why nd is not differentiable, or NULL. */
static const char *jvp_node(ir_graph *g, const ir_node *nd, ir_value **tan) {
  /* a send of a value with a tangent sends the tangent too (the peer
   * receives it: a received float value always gets a tangent) */
  bool any = nd->op == IR_OP_RECV, float_out = nd->op == IR_OP_SEND;
  for (int j = 0; j < nd->n_out; j++) float_out |= ir_dtype_is_float(nd->out[j]->type.dtype);
  for (int i = 0; i < nd->n_in; i++) any |= tan[nd->in[i]->id] != NULL;
  if (!any || !float_out) return NULL;
  const jvp_rule r = jvp_rule_of(nd->op);
  const char *why = r.fn ? ad_node_nondiff(nd) : r.nondiff;
  if (why || !r.fn) return why ? why : "not differentiable";
  ir_value **tx = calloc((size_t)(nd->n_in ? nd->n_in : 1), sizeof *tx);
  ir_value **ty = calloc((size_t)(nd->n_out ? nd->n_out : 1), sizeof *ty);
  const char **tn = calloc((size_t)(nd->n_out ? nd->n_out : 1), sizeof *tn);
  if (!tx || !ty || !tn) IR_DIE("out of memory (tx || !ty || !tn)");
  for (int i = 0; i < nd->n_in; i++) tx[i] = tan[nd->in[i]->id];
  for (int j = 0; j < nd->n_out; j++) tn[j] = ad_prefixed(g, "t_", nd->out[j]);
  ad_ctx c = {.g = g, .fwd = nd, .dn = tn};
  r.fn(&c, nd, tx, ty);
  for (int j = 0; j < nd->n_out; j++) {
    if (!ty[j] || !ir_dtype_is_float(nd->out[j]->type.dtype)) continue;
    if (!ir_type_equal(&ty[j]->type, &nd->out[j]->type)) {
      char a[128], b[128];
      fprintf(stderr, "tgc: internal error: jvp of %s gave %s for result %s\n", ir_op_name(nd->op),
              ir_type_str(&ty[j]->type, a, sizeof a), ir_type_str(&nd->out[j]->type, b, sizeof b));
      abort();
    }
    tan[nd->out[j]->id] = ty[j];
  }
  free(tx);
  free(ty);
  free(tn);
  return NULL;
}

/* layernorm_grad / rmsnorm_grad (a norm's backward, differentiated again):
 * the op written in primitives (ad_norm_grad_prims), then a forward sweep
 * over those nodes alone, from the tangents of its operands to those of its
 * results. The primitives' own results are left dead (canonicalize removes
 * them). */
static void jvp_norm_grad(ad_ctx *c, const ir_node *n, ir_value *const *tx, ir_value **ty) {
  ir_graph *g = c->g;
  ir_value *e[3];
  int first = g->n_nodes;
  ad_norm_grad_prims(c, n, e);
  int last = g->n_nodes, bound = ir_graph_id_bound(g); /* the new values' ids index tan too */
  ir_value **tan = calloc((size_t)bound, sizeof *tan);
  if (!tan) IR_DIE("out of memory (tan)");
  for (int i = 0; i < n->n_in; i++) tan[n->in[i]->id] = tx[i];
  for (int k = first; k < last; k++)
    if (jvp_node(g, g->nodes[k], tan)) abort(); /* every primitive it writes has a rule */
  for (int j = 0; j < n->n_out; j++) ty[j] = tan[e[j]->id];
  free(tan);
}

int pass_jvp(ir_graph *g, ir_value *const *wrt, ir_value *const *tangents, int n, ir_value *const *of, int n_of,
             ir_value **out, ir_diag *d) {
  for (int i = 0; i < n; i++)
    if (!ir_type_equal(&wrt[i]->type, &tangents[i]->type)) {
      char a[128], b[128];
      ir_error(d, wrt[i]->loc, "the tangent of %%%s must be %s, got %s", wrt[i]->name,
               ir_type_str(&wrt[i]->type, a, sizeof a), ir_type_str(&tangents[i]->type, b, sizeof b));
      return -1;
    }
  int nv = ir_graph_id_bound(g), nn = g->n_nodes, rc = 0;
  ir_value **tan = calloc((size_t)nv, sizeof *tan);
  bool *needed = calloc((size_t)nv, sizeof *needed);
  if (!tan || !needed) IR_DIE("out of memory (tan || !needed)");
  for (int j = 0; j < n_of; j++) needed[of[j]->id] = true;
  for (int k = nn - 1; k >= 0; k--) {
    ir_node *nd = g->nodes[k];
    bool any = nd->op == IR_OP_SEND; /* what is sent may reach a needed value on the peer */
    for (int j = 0; j < nd->n_out; j++) any |= needed[nd->out[j]->id];
    if (any && !nd->dead)
      for (int i = 0; i < nd->n_in; i++) needed[nd->in[i]->id] = true;
  }
  for (int i = 0; i < n; i++) {
    if (!ir_dtype_is_float(wrt[i]->type.dtype)) continue;
    ad_ctx c = {.g = g, .fwd = wrt[i]->def, .loc = wrt[i]->loc};
    tan[wrt[i]->id] = ad_add(&c, tan[wrt[i]->id], tangents[i], NULL);
  }
  for (int k = 0; k < nn; k++) {
    ir_node *nd = g->nodes[k];
    bool want = nd->op == IR_OP_SEND;
    for (int j = 0; j < nd->n_out; j++) want |= needed[nd->out[j]->id];
    const char *why = nd->dead || !want ? NULL : jvp_node(g, nd, tan);
    if (why) {
      ir_error(d, nd->loc, "cannot differentiate %s%s: '%s' is %s", nd->n_out ? "%" : "",
               nd->n_out ? nd->out[0]->name : ir_op_name(nd->op), ir_op_name(nd->op), why);
      rc = -1;
      break;
    }
  }
  for (int j = 0; rc == 0 && j < n_of; j++) {
    out[j] = tan[of[j]->id];
    if (!out[j]) {
      ad_ctx c = {.g = g, .fwd = of[j]->def, .loc = of[j]->loc};
      out[j] = ad_fill(&c, &of[j]->type, 0.0, ad_prefixed(g, "t_", of[j]));
    }
  }
  free(tan);
  free(needed);
  return rc;
}
