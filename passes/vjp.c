/* passes/vjp.c — reverse mode: a VJP rule per op and pass_vjp, which
 * appends the backward graph of a scalar loss.
 *
 * requires: a verified graph in topological order; loss rank-0 float.
 * invalidates: nothing — it only appends nodes (pass_autodiff places them).
 *
 * How it works:
 *  1. activity: a value is active if it is a float value that depends on a
 *     wrt value (wrt values are active); the sweep only differentiates
 *     active operands, so integer ids, bool masks and constants never get
 *     gradients and comparisons/casts to integers stop the flow;
 *  2. the cotangent of the loss is seeded with 1 (d_<loss>);
 *  3. nodes are visited in reverse order from the loss's definition; a node
 *     whose results carry cotangents calls its rule, which builds the
 *     operands' gradients (gx[i] for each operand with need[i]); a value used
 *     several times accumulates its contributions with add;
 *  4. grads[i] is the accumulated cotangent of wrt[i], or zeros.
 * Values made here are named d_<forward operand> (rules name the value they
 * return; temporaries are anonymous), have role grad and carry the location
 * and layer of the forward node they differentiate.
 *
 * The rule table is indexed by the op enum; an op with no rule has an
 * explicit reason it is not differentiable (comparisons, logic, sources,
 * grad requests). tests/unit/test_autodiff.c loops over ops.def and fails on
 * an op with neither.
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "autodiff_impl.h"

typedef void (*vjp_fn)(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx);
typedef struct {
  vjp_fn fn;
  const char *nondiff; /* why the op has no rule */
} vjp_rule;

#define NEED(i) (c->need[i])
#define DN(i) (c->dn[i])

/* The name for a value that will be unbroadcast to operand i: the final
 * name only if no reduction follows. */
static const char *fin(ad_ctx *c, const ir_node *n, int i) {
  return ad_same_dims(&n->out[0]->type, &n->in[i]->type) ? DN(i) : NULL;
}

static void vjp_unary(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_unary_apply(c, gy[0], DN(0));
}

static void vjp_cast(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_cast(c, gy[0], n->in[0]->type.dtype, DN(0));
}

static void vjp_binary(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  for (int i = 0; i < 2; i++)
    if (NEED(i)) gx[i] = ad_unbroadcast(c, ad_binary_apply(c, i, gy[0], fin(c, n, i)), &n->in[i]->type, DN(i));
}

static void vjp_where(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *zero = ad_scalar(c, gy[0]->type.dtype, 0);
  if (NEED(1)) gx[1] = ad_unbroadcast(c, ad_where(c, n->in[0], gy[0], zero, fin(c, n, 1)), &n->in[1]->type, DN(1));
  if (NEED(2)) gx[2] = ad_unbroadcast(c, ad_where(c, n->in[0], zero, gy[0], fin(c, n, 2)), &n->in[2]->type, DN(2));
}

/* y = a @ b: da = g @ b^T, db = a^T @ g, summed over broadcast batch dims
 * (for a rank-2 b under a batched a, the sum is folded into one matmul) */
static bool same_batch(const ir_type *y, const ir_type *x) {
  if (y->rank != x->rank) return false;
  for (int i = 0; i < y->rank - 2; i++)
    if (y->dims[i] != x->dims[i]) return false;
  return true;
}

/* With transpose_a / transpose_b set, the rule runs on the materialized
 * transposes (a = swap(in[0]), b = swap(in[1])) and the gradient of a
 * transposed operand is swapped back to the operand's own layout
 * (canonicalize cancels swap pairs, fuse-transpose folds what is left). */
static void vjp_matmul(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  bool ta = ir_node_attr_int(n, "transpose_a", 0) != 0, tb = ir_node_attr_int(n, "transpose_b", 0) != 0;
  ir_value *a = ta ? ad_swap_last2(c, n->in[0]) : n->in[0], *b = tb ? ad_swap_last2(c, n->in[1]) : n->in[1];
  const char *dn0 = ta ? NULL : DN(0), *dn1 = tb ? NULL : DN(1);
  const ir_type *y = &n->out[0]->type;
  if (NEED(0)) {
    ir_value *in[2] = {gy[0], ad_swap_last2(c, b)};
    ir_value *m = ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, same_batch(y, &a->type) ? dn0 : NULL);
    gx[0] = ad_unbroadcast(c, m, &a->type, dn0);
    if (ta) gx[0] = ad_swap_last2_named(c, gx[0], DN(0));
  }
  if (NEED(1) && b->type.rank == 2 && a->type.rank >= 3) {
    /* x @ W with W shared by every batch element: the batch sum is part of
     * the contraction, db = a2^T @ g2 with a2 = a as [P*M, K], g2 = g as
     * [P*M, N] — one 2-D product instead of P products then a reduce_sum. */
    int64_t rows = 1;
    for (int d = 0; d < a->type.rank - 1; d++) rows *= a->type.dims[d];
    int64_t ad[2] = {rows, a->type.dims[a->type.rank - 1]}, gd[2] = {rows, y->dims[y->rank - 1]};
    ir_value *a2 = ad_reshape(c, a, ad, 2, NULL), *g2 = ad_reshape(c, gy[0], gd, 2, NULL);
    const ir_node *bd = b->def;
    const ir_attr *perm = bd && bd->op == IR_OP_TRANSPOSE ? ir_node_attr(bd, "perm") : NULL;
    int64_t K = ad[1], N = gd[1];
    if (perm && perm->kind == IR_ATTR_INTS && perm->n == 2 && perm->ints[0] == 1 && rows * N < K * N + rows * K) {
      /* b = W^T (a tied output projection): db^T = g2^T @ a2 is dW itself;
       * canonicalize cancels the transpose below against the transpose
       * rule's, so the [K, N] product is never transposed — chosen when
       * transposing g2 moves fewer elements than transposing a2 and db */
      ir_value *in[2] = {ad_swap_last2(c, g2), a2};
      int64_t swap[2] = {1, 0};
      gx[1] = ad_transpose(c, ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, NULL), swap, dn1);
    } else {
      ir_value *in[2] = {ad_swap_last2(c, a2), g2};
      gx[1] = ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, dn1);
    }
  } else if (NEED(1)) {
    ir_value *in[2] = {ad_swap_last2(c, a), gy[0]};
    ir_value *m = ad_op(c, IR_OP_MATMUL, in, 2, NULL, 0, same_batch(y, &b->type) ? dn1 : NULL);
    gx[1] = ad_unbroadcast(c, m, &b->type, dn1);
  }
  if (tb && gx[1]) gx[1] = ad_swap_last2_named(c, gx[1], DN(1));
}

static void vjp_transpose(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  const ir_attr *p = ir_node_attr(n, "perm");
  int64_t inv[IR_MAX_RANK];
  for (int i = 0; i < p->n; i++) inv[p->ints[i]] = i;
  gx[0] = ad_transpose(c, gy[0], inv, DN(0));
}

static void vjp_reshape(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_reshape(c, gy[0], n->in[0]->type.dims, n->in[0]->type.rank, DN(0));
}

static void vjp_broadcast(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_unbroadcast(c, gy[0], &n->in[0]->type, DN(0));
}

static void vjp_slice(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  int64_t axis = ir_node_attr_int(n, "axis", 0);
  ir_attr a[5] = {ir_attr_int("axis", axis), ir_attr_int("start", ir_node_attr_int(n, "start", 0)),
                  ir_attr_int("end", ir_node_attr_int(n, "end", 0)), ir_attr_int("step", ir_node_attr_int(n, "step", 1)),
                  ir_attr_int("size", n->in[0]->type.dims[axis])};
  gx[0] = ad_op(c, IR_OP_UNSLICE, gy, 1, a, 5, DN(0));
}

static void vjp_unslice(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_slice(c, gy[0], (int)ir_node_attr_int(n, "axis", 0), ir_node_attr_int(n, "start", 0),
                   ir_node_attr_int(n, "end", 0), ir_node_attr_int(n, "step", 1), DN(0));
}

static void vjp_concat(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  int axis = (int)ir_node_attr_int(n, "axis", 0);
  int64_t off = 0;
  for (int i = 0; i < n->n_in; i++) {
    int64_t size = n->in[i]->type.dims[axis];
    if (NEED(i)) gx[i] = ad_slice(c, gy[0], axis, off, off + size, 1, DN(i));
    off += size;
  }
}

static void vjp_split(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value **parts = malloc((size_t)n->n_out * sizeof *parts);
  if (!parts) IR_DIE("out of memory (parts)");
  for (int j = 0; j < n->n_out; j++) parts[j] = gy[j] ? gy[j] : ad_fill(c, &n->out[j]->type, 0, NULL);
  ir_attr a = ir_attr_int("axis", ir_node_attr_int(n, "axis", 0));
  gx[0] = n->n_out == 1 ? parts[0] : ad_op(c, IR_OP_CONCAT, parts, n->n_out, &a, 1, DN(0));
  free(parts);
}

/* The shape of x with the reduced axes of n kept as 1. */
static void keepdims_dims(const ir_node *n, int64_t *dims, int *rank) {
  const ir_type *x = &n->in[0]->type;
  const ir_attr *axes = ir_node_attr(n, "axes");
  *rank = x->rank;
  for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d];
  for (int i = 0; axes && i < axes->n; i++) dims[axes->ints[i]] = 1;
}

/* g reshaped to the keepdims shape (a no-op when keepdims was set). */
static ir_value *to_keepdims(ad_ctx *c, const ir_node *n, ir_value *g) {
  int64_t dims[IR_MAX_RANK];
  int rank;
  keepdims_dims(n, dims, &rank);
  ir_type t = {.rank = rank};
  memcpy(t.dims, dims, sizeof dims);
  return ad_same_dims(&g->type, &t) ? g : ad_reshape(c, g, dims, rank, NULL);
}

static void vjp_reduce(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *x = n->in[0], *g = to_keepdims(c, n, gy[0]);
  ir_dtype dt = x->type.dtype;
  switch (n->op) {
  case IR_OP_REDUCE_SUM: gx[0] = ad_fit(c, g, &x->type, DN(0)); break;
  case IR_OP_REDUCE_MEAN: {
    int64_t count = ir_type_numel(&x->type) / (ir_type_numel(&g->type) ? ir_type_numel(&g->type) : 1);
    ir_value *k = ad_scalar(c, dt, count ? 1.0 / (double)count : 0.0);
    gx[0] = ad_fit(c, ad_bin(c, IR_OP_MUL, g, k, NULL), &x->type, DN(0));
    break;
  }
  default: { /* max: the gradient goes to every element equal to the maximum */
    ir_value *mask = ad_bin(c, IR_OP_EQ, x, to_keepdims(c, n, n->out[0]), NULL);
    gx[0] = ad_where(c, mask, g, ad_scalar(c, dt, 0), DN(0));
    break;
  }
  }
}

static void vjp_softmax(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  int axis = (int)ir_node_attr_int(n, "axis", 0);
  ir_value *y = n->out[0], *g = gy[0];
  if (n->op == IR_OP_SOFTMAX) {
    gx[0] = ad_softmax_jvp(c, y, g, axis, DN(0));
  } else { /* log_softmax: g - exp(y) * sum(g) */
    ir_value *e = ad_un(c, IR_OP_EXP, y, NULL);
    gx[0] = ad_bin(c, IR_OP_SUB, g, ad_bin(c, IR_OP_MUL, e, ad_last_sum(c, g, axis), NULL), DN(0));
  }
}

/* layernorm: y = xhat * gamma + beta; rmsnorm: y = xhat * gamma. One
 * layernorm_grad / rmsnorm_grad (x, gamma, dy) -> (dx, dgamma[, dbeta])
 * that recomputes the row statistics from x (runtime/cpu/kern_reduce.c
 * has the formula): the expansion into primitives (ad_norm_grad_prims,
 * which its own VJP and JVP differentiate) is ~14 ops that each read or
 * wrote a [..., D] tensor. It computes every gradient, needed or not. */
static void vjp_norm(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  bool ln = n->op == IR_OP_LAYERNORM;
  ir_value *in[3] = {n->in[0], n->in[1], gy[0]}, *outs[3];
  const char *names[3] = {DN(0), DN(1), ln ? DN(2) : NULL};
  ir_attr eps = ir_attr_float("eps", ir_node_attr_float(n, "eps", ln ? 1e-5 : 1e-6));
  ad_op_multi(c, ln ? IR_OP_LAYERNORM_GRAD : IR_OP_RMSNORM_GRAD, in, 3, &eps, 1, names, outs);
  for (int i = 0; i < (ln ? 3 : 2); i++) gx[i] = outs[i];
}

/* Below the rule table: it sweeps with the rules of the primitives. */
static void vjp_norm_grad(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx);

static void vjp_embedding(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *in[2] = {n->in[1], gy[0]};
  ir_attr a = ir_attr_int("vocab", n->in[0]->type.dims[0]);
  gx[0] = ad_op(c, IR_OP_EMBEDDING_GRAD, in, 2, &a, 1, DN(0));
}

static void vjp_embedding_grad(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *in[2] = {gy[0], n->in[0]};
  gx[1] = ad_op(c, IR_OP_EMBEDDING, in, 2, NULL, 0, DN(1));
}

static void vjp_cross_entropy(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *in[3] = {n->in[0], n->in[1], gy[0]};
  gx[0] = ad_op(c, IR_OP_CROSS_ENTROPY_GRAD, in, 3, NULL, 0, DN(0));
}

/* y = (softmax(l) - onehot(t)) * s / P */
static void vjp_cross_entropy_grad(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *l = n->in[0], *g = gy[0];
  ir_dtype dt = l->type.dtype;
  int last = l->type.rank - 1;
  if (NEED(2)) {
    ir_value *in[3] = {l, n->in[1], ad_scalar(c, dt, 1)};
    ir_value *base = ad_op(c, IR_OP_CROSS_ENTROPY_GRAD, in, 3, NULL, 0, NULL);
    int64_t axes[IR_MAX_RANK];
    for (int i = 0; i <= last; i++) axes[i] = i;
    gx[2] = ad_reduce(c, IR_OP_REDUCE_SUM, ad_bin(c, IR_OP_MUL, g, base, NULL), axes, last + 1, false, DN(2));
  }
  if (NEED(0)) {
    int64_t P = ir_type_numel(&n->in[1]->type);
    ir_attr a = ir_attr_int("axis", last);
    ir_value *s = ad_op(c, IR_OP_SOFTMAX, &l, 1, &a, 1, NULL);
    ir_value *scale = ad_bin(c, IR_OP_MUL, n->in[2], ad_scalar(c, dt, 1.0 / (double)(P ? P : 1)), NULL);
    gx[0] = ad_bin(c, IR_OP_MUL, ad_softmax_jvp(c, s, g, last, NULL), scale, DN(0));
  }
}

static void vjp_causal_mask(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_attr a = ir_attr_float("fill", 0.0);
  gx[0] = ad_op(c, IR_OP_CAUSAL_MASK, gy, 1, &a, 1, DN(0));
}

/* dropout is linear in x with a fixed mask: dx = dropout(dy) with the same
 * key and positions, the mask drawn again (nothing kept for it). */
static void vjp_dropout(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *in[2 + IR_MAX_RANK];
  in[0] = gy[0];
  for (int i = 1; i < n->n_in; i++) in[i] = n->in[i];
  gx[0] = ad_op(c, IR_OP_DROPOUT, in, n->n_in, n->attrs, n->n_attrs, DN(0));
}

/* d/d operand i of einsum(terms -> out): einsum(out, other terms -> the
 * letters of term i that occur elsewhere), then reshaped and broadcast back
 * over letters only operand i has, and masked to the diagonal where term i
 * repeats a letter. */
static void vjp_einsum(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ad_einsum_eq e;
  if (!ad_einsum_terms(ir_node_attr(n, "eq")->einsum, n->n_in, &e)) IR_DIE("out of memory (ad_einsum_terms(ir_node_attr(n, \"eq\")->einsum, n->n_in, &e))"); /* verified graphs have it */
  ir_value **ops = malloc((size_t)(n->n_in + 1) * sizeof *ops);
  if (!ops) IR_DIE("out of memory (ops)");
  for (int i = 0; i < n->n_in; i++) {
    if (!NEED(i)) continue;
    const char *ti = e.terms[i];
    int ri = (int)strlen(ti);
    /* kept: first occurrences of letters found in out or another term */
    bool kept[IR_MAX_RANK] = {false};
    char red[IR_MAX_RANK + 1] = "";
    int nr = 0;
    for (int p = 0; p < ri; p++) {
      if (memchr(ti, ti[p], (size_t)p)) continue;
      bool elsewhere = strchr(e.out, ti[p]) != NULL;
      for (int j = 0; j < e.n && !elsewhere; j++) elsewhere = j != i && strchr(e.terms[j], ti[p]);
      if (elsewhere) kept[p] = true, red[nr++] = ti[p];
    }
    red[nr] = 0;
    char eq[256];
    int k = snprintf(eq, sizeof eq, "%s", e.out);
    int n_ops = 0;
    ops[n_ops++] = gy[0];
    for (int j = 0; j < e.n; j++)
      if (j != i) {
        k += snprintf(eq + k, sizeof eq - (size_t)k, ",%s", e.terms[j]);
        ops[n_ops++] = n->in[j];
      }
    snprintf(eq + k, sizeof eq - (size_t)k, "->%s", red);
    ir_value *x = n->in[i], *v;
    if (n_ops == 1 && strcmp(e.out, red) == 0) {
      v = gy[0];
    } else {
      ir_attr a = ir_attr_str("eq", eq);
      bool last = nr == ri; /* nothing to reshape, broadcast or mask */
      v = ad_op(c, IR_OP_EINSUM, ops, n_ops, &a, 1, last ? DN(i) : NULL);
    }
    if (nr != ri) {
      int64_t dims[IR_MAX_RANK];
      for (int p = 0; p < ri; p++) dims[p] = kept[p] ? x->type.dims[p] : 1;
      bool repeats = false;
      for (int p = 0; p < ri; p++) repeats |= memchr(ti, ti[p], (size_t)p) != NULL;
      ir_type kt = {.rank = ri};
      memcpy(kt.dims, dims, sizeof dims);
      if (!ad_same_dims(&v->type, &kt)) v = ad_reshape(c, v, dims, ri, NULL);
      v = ad_fit(c, v, &x->type, repeats ? NULL : DN(i));
      for (int q = 0; q < ri; q++) {
        const char *first = memchr(ti, ti[q], (size_t)q);
        if (!first) continue;
        ir_type it = x->type;
        it.dtype = IR_DT_I32;
        ir_attr ap = ir_attr_int("axis", first - ti), aq = ir_attr_int("axis", q);
        char err[256];
        ir_node *ip = ir_graph_build(c->g, IR_OP_IOTA, NULL, 0, &ap, 1, &it, NULL, n->loc, err, sizeof err);
        ir_node *iq = ir_graph_build(c->g, IR_OP_IOTA, NULL, 0, &aq, 1, &it, NULL, n->loc, err, sizeof err);
        if (!ip || !iq) IR_DIE("out of memory (ip || !iq)");
        ip->layer = iq->layer = n->layer;
        ip->out[0]->role = iq->out[0]->role = IR_ROLE_GRAD;
        ir_value *mask = ad_bin(c, IR_OP_EQ, ip->out[0], iq->out[0], NULL);
        bool more = false;
        for (int r = q + 1; r < ri; r++) more |= memchr(ti, ti[r], (size_t)r) != NULL;
        v = ad_where(c, mask, v, ad_scalar(c, x->type.dtype, 0), more ? NULL : DN(i));
      }
    }
    gx[i] = v;
  }
  free(ops);
}

/* attention (fused by fuse-attention): the cotangent of o goes through the
 * fused backward, attention_grad (FlashAttention-2: recomputes the scores
 * from q, k and lse). lse has no gradient in graphs the pass makes (only
 * attention_grad reads it); if something else reads it, d lse_i / d s_ij =
 * p_ij, built here in primitives (T x S, as the unfused graph would):
 *   p = exp(scale q k^T (masked) - lse);  ds = p * g_lse;
 *   dq += scale ds k;  dk += scale ds^T q. */
static void vjp_attention(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
  if (n->n_in != 3) IR_DIE("the VJP of attention with a qpos operand (a decode step) is not defined");
  /* grouped-query: attention_grad reads the shared kv heads and gives dk,
   * dv of their shapes (each summed over its group of query heads in the
   * kernel); only the lse path below, in primitives, repeats k */
  int rq = q->type.rank;
  int64_t hq = rq >= 3 ? q->type.dims[rq - 3] : 1, hkv = rq >= 3 ? k->type.dims[rq - 3] : 1;
  bool gqa = hkv != hq;
  if (gy[0]) {
    ir_value *in[6] = {q, k, v, n->out[0], n->out[1], gy[0]}, *outs[3];
    const char *names[3] = {gy[1] ? NULL : DN(0), gy[1] ? NULL : DN(1), DN(2)};
    ad_op_multi(c, IR_OP_ATTENTION_GRAD, in, 6, n->attrs, n->n_attrs, names, outs);
    for (int i = 0; i < 3; i++) gx[i] = outs[i];
  }
  if (gy[1]) {
    ir_dtype dt = q->type.dtype;
    int r = q->type.rank;
    double scale = ir_node_attr_float(n, "scale", 1.0);
    ir_value *kr = gqa ? ad_repeat_kv(c, k, hq) : k;
    ir_value *qk[2] = {q, ad_swap_last2(c, kr)};
    ir_value *s = ad_bin(c, IR_OP_MUL, ad_op(c, IR_OP_MATMUL, qk, 2, NULL, 0, NULL), ad_scalar(c, dt, scale), NULL);
    if (ir_node_attr_int(n, "causal", 0)) s = ad_op(c, IR_OP_CAUSAL_MASK, &s, 1, NULL, 0, NULL);
    int64_t col[IR_MAX_RANK];
    for (int i = 0; i < r - 1; i++) col[i] = q->type.dims[i];
    col[r - 1] = 1; /* [..., T] -> [..., T, 1] */
    ir_value *lse = ad_reshape(c, ad_cast(c, n->out[1], dt, NULL), col, r, NULL);
    ir_value *gl = ad_reshape(c, ad_cast(c, gy[1], dt, NULL), col, r, NULL);
    ir_value *p = ad_un(c, IR_OP_EXP, ad_bin(c, IR_OP_SUB, s, lse, NULL), NULL);
    ir_value *ds = ad_bin(c, IR_OP_MUL, ad_bin(c, IR_OP_MUL, p, gl, NULL), ad_scalar(c, dt, scale), NULL);
    ir_value *dsk[2] = {ds, kr}, *dsq[2] = {ad_swap_last2(c, ds), q};
    if (NEED(0)) gx[0] = ad_add(c, gx[0], ad_op(c, IR_OP_MATMUL, dsk, 2, NULL, 0, NULL), DN(0));
    if (NEED(1)) {
      ir_value *dk = ad_op(c, IR_OP_MATMUL, dsq, 2, NULL, 0, NULL);
      if (gqa) dk = ad_sum_kv(c, dk, hkv, NULL);
      gx[1] = ad_add(c, gx[1], dk, DN(1));
    }
  }
}

/* Communication: Megatron-LM's conjugate pairs. all_reduce's cotangent is
 * replicated, so its VJP is the identity (and comm_broadcast's, whose result
 * is replicated too); all_gather <-> reduce_scatter; all_to_all swaps its
 * dims; mesh_slice gathers the blocks back; send <-> recv (a send's operand
 * receives its gradient from the peer it was sent to). */
static void vjp_identity(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  (void)c, (void)n;
  gx[0] = gy[0];
}

static void vjp_gather_scatter(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "dim")};
  gx[0] = ad_op(c, n->op == IR_OP_REDUCE_SCATTER ? IR_OP_ALL_GATHER : IR_OP_REDUCE_SCATTER, gy, 1, a, 3, DN(0));
}

static void vjp_mesh_slice(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "dim")};
  gx[0] = ad_op(c, IR_OP_ALL_GATHER, gy, 1, a, 3, DN(0));
}

/* a sharding constraint: the gradient laid out as the value (JAX does the same) */
static void vjp_shard_hint(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  gx[0] = ad_op(c, IR_OP_SHARD_HINT, gy, 1, n->attrs, n->n_attrs, DN(0));
}

static void vjp_all_to_all(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_attr a[4] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ir_attr_int("split_dim", ir_node_attr_int(n, "concat_dim", 0)),
                  ir_attr_int("concat_dim", ir_node_attr_int(n, "split_dim", 0))};
  gx[0] = ad_op(c, IR_OP_ALL_TO_ALL, gy, 1, a, 4, DN(0));
}

static void vjp_send(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  (void)gy;
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "peer")};
  gx[0] = ad_recv(c, &n->in[0]->type, a, 3, DN(0));
}

static void vjp_recv(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  (void)gx;
  ir_attr a[3] = {ad_node_attr(n, "axis"), ad_node_attr(n, "n"), ad_node_attr(n, "peer")};
  ad_send(c, gy[0], a, 3);
}

#define RULE(f) {f, NULL}
#define NONDIFF(why) {NULL, why}
#define FUSED_OP "a fused op (the fusion passes make it after autodiff; differentiate the graph before fusing)"
/* Rules of the ops that are not plain elementwise; those take theirs from
 * their kind and flags (vjp_rule_of). */
static const vjp_rule vjp_rules[IR_NUM_OPS] = {
    [IR_OP_CONST] = NONDIFF("a constant"),
    [IR_OP_IOTA] = NONDIFF("an index tensor"),
    [IR_OP_WHERE] = RULE(vjp_where),
    [IR_OP_MATMUL] = RULE(vjp_matmul),
    [IR_OP_TRANSPOSE] = RULE(vjp_transpose),
    [IR_OP_RESHAPE] = RULE(vjp_reshape),
    [IR_OP_BROADCAST] = RULE(vjp_broadcast),
    [IR_OP_SLICE] = RULE(vjp_slice),
    [IR_OP_CONCAT] = RULE(vjp_concat),
    [IR_OP_SPLIT] = RULE(vjp_split),
    [IR_OP_REDUCE_SUM] = RULE(vjp_reduce),
    [IR_OP_REDUCE_MEAN] = RULE(vjp_reduce),
    [IR_OP_REDUCE_MAX] = RULE(vjp_reduce),
    [IR_OP_SOFTMAX] = RULE(vjp_softmax),
    [IR_OP_LOG_SOFTMAX] = RULE(vjp_softmax),
    [IR_OP_LAYERNORM] = RULE(vjp_norm),
    [IR_OP_RMSNORM] = RULE(vjp_norm),
    [IR_OP_EMBEDDING] = RULE(vjp_embedding),
    [IR_OP_CROSS_ENTROPY] = RULE(vjp_cross_entropy),
    [IR_OP_CAUSAL_MASK] = RULE(vjp_causal_mask),
    [IR_OP_DROPOUT] = RULE(vjp_dropout),
    [IR_OP_EINSUM] = RULE(vjp_einsum),
    [IR_OP_ARGMAX] = NONDIFF("an index (integer result)"),
    [IR_OP_COUNT_NONFINITE] = NONDIFF("a count (integer result)"),
    [IR_OP_SUM_SQUARES] = NONDIFF("a multi-tensor reduction made after autodiff (fuse-elementwise)"),
    [IR_OP_GRAD] = NONDIFF("a gradient request that is not expanded yet (the autodiff pass expands grad nodes in "
                           "order, so differentiate the expanded graph)"),
    [IR_OP_UNSLICE] = RULE(vjp_unslice),
    [IR_OP_EMBEDDING_GRAD] = RULE(vjp_embedding_grad),
    [IR_OP_CROSS_ENTROPY_GRAD] = RULE(vjp_cross_entropy_grad),
    [IR_OP_FUSED] = NONDIFF(FUSED_OP),
    [IR_OP_FUSED_MATMUL] = NONDIFF(FUSED_OP),
    [IR_OP_ADD_LAYERNORM] = NONDIFF(FUSED_OP),
    [IR_OP_LINEAR_CROSS_ENTROPY] = NONDIFF(FUSED_OP),
    [IR_OP_ATTENTION] = RULE(vjp_attention),
    [IR_OP_ALL_REDUCE] = RULE(vjp_identity),
    [IR_OP_ALL_GATHER] = RULE(vjp_gather_scatter),
    [IR_OP_REDUCE_SCATTER] = RULE(vjp_gather_scatter),
    [IR_OP_ALL_TO_ALL] = RULE(vjp_all_to_all),
    [IR_OP_COMM_BROADCAST] = RULE(vjp_identity),
    [IR_OP_SEND] = RULE(vjp_send),
    [IR_OP_RECV] = RULE(vjp_recv),
    [IR_OP_MESH_SLICE] = RULE(vjp_mesh_slice),
    [IR_OP_SHARD_HINT] = RULE(vjp_shard_hint),
    [IR_OP_LAYERNORM_GRAD] = RULE(vjp_norm_grad),
    [IR_OP_RMSNORM_GRAD] = RULE(vjp_norm_grad),
    [IR_OP_ATTENTION_GRAD] = NONDIFF("the fused attention backward, which is not differentiated again (for second "
                                     "derivatives differentiate the unfused graph: --disable-pass fuse-attention)"),
};

/* The rule of op: elementwise ops share theirs (the derivative of each is in
 * autodiff_build.c); comparisons and logic are not differentiable. */
static vjp_rule vjp_rule_of(ir_op op) {
  if (op == IR_OP_CAST) return (vjp_rule)RULE(vjp_cast);
  ir_op_kind k = ir_op_kind_of(op);
  if (k == IR_OPK_UNARY || k == IR_OPK_BINARY) {
    if (ir_op_has(op, IR_OPF_CMP)) return (vjp_rule)NONDIFF("a comparison");
    if (ir_op_has(op, IR_OPF_BOOL)) return (vjp_rule)NONDIFF("a logical operation");
    return k == IR_OPK_UNARY ? (vjp_rule)RULE(vjp_unary) : (vjp_rule)RULE(vjp_binary);
  }
  return (unsigned)op < IR_NUM_OPS ? vjp_rules[op] : (vjp_rule)NONDIFF("not an op");
}

bool pass_vjp_has_rule(ir_op op, const char **why) {
  vjp_rule r = vjp_rule_of(op);
  *why = r.nondiff;
  return r.fn != NULL;
}

/* Marks active the float results of the nodes [from, to) that read an
 * active value (or receive one: it depends on the sender's parameters). */
static void mark_active(const ir_graph *g, int from, int to, bool *active) {
  for (int k = from; k < to; k++) {
    const ir_node *nd = g->nodes[k];
    if (nd->dead) continue;
    bool any = nd->op == IR_OP_RECV;
    for (int i = 0; i < nd->n_in; i++) any |= active[nd->in[i]->id];
    for (int j = 0; any && j < nd->n_out; j++)
      if (ir_dtype_is_float(nd->out[j]->type.dtype)) active[nd->out[j]->id] = true;
  }
}

/* One step of the reverse sweep: when results of nd carry cotangents (ct,
 * by value id), its rule builds the gradients of its active operands and
 * adds each to the operand's cotangent. Returns why nd is not
 * differentiable, or NULL. */
static const char *vjp_node(ir_graph *g, const ir_node *nd, const bool *active, ir_value **ct) {
  bool has = nd->op == IR_OP_SEND && active[nd->in[0]->id]; /* its gradient comes back from the peer */
  for (int j = 0; j < nd->n_out; j++) has |= ct[nd->out[j]->id] != NULL;
  if (!has) return NULL;
  const vjp_rule r = vjp_rule_of(nd->op);
  const char *why = r.fn ? ad_node_nondiff(nd) : r.nondiff;
  if (why || !r.fn) return why ? why : "not differentiable";
  int m = nd->n_in > 0 ? nd->n_in : 1;
  bool *need = calloc((size_t)m, sizeof *need);
  const char **dn = calloc((size_t)m, sizeof *dn);
  ir_value **gx = calloc((size_t)m, sizeof *gx);
  ir_value **gy = calloc((size_t)(nd->n_out ? nd->n_out : 1), sizeof *gy);
  if (!need || !dn || !gx || !gy) IR_DIE("out of memory (need || !dn || !gx || !gy)");
  for (int i = 0; i < nd->n_in; i++) {
    need[i] = active[nd->in[i]->id];
    dn[i] = ad_prefixed(g, "d_", nd->in[i]);
  }
  for (int j = 0; j < nd->n_out; j++) gy[j] = ct[nd->out[j]->id];
  ad_ctx c = {.g = g, .fwd = nd, .need = need, .dn = dn};
  r.fn(&c, nd, gy, gx);
  for (int i = 0; i < nd->n_in; i++) {
    ir_value *in = nd->in[i];
    if (!gx[i] || !need[i]) continue;
    if (!ir_type_equal(&gx[i]->type, &in->type)) {
      char a[128], b[128];
      fprintf(stderr, "tgc: internal error: vjp of %s gave %s for operand %s\n", ir_op_name(nd->op),
              ir_type_str(&gx[i]->type, a, sizeof a), ir_type_str(&in->type, b, sizeof b));
      abort();
    }
    ct[in->id] = ct[in->id] ? ad_bin(&c, IR_OP_ADD, ct[in->id], gx[i], dn[i]) : gx[i];
  }
  free(need);
  free(dn);
  free(gx);
  free(gy);
  return NULL;
}

/* layernorm_grad / rmsnorm_grad (a norm's backward, differentiated again
 * for a second derivative): the op written in primitives
 * (ad_norm_grad_prims), then a reverse sweep over those nodes alone, from
 * the cotangents of the op's results to its operands. The primitives' own
 * results are left dead (canonicalize removes them). */
static void vjp_norm_grad(ad_ctx *c, const ir_node *n, ir_value *const *gy, ir_value **gx) {
  ir_graph *g = c->g;
  ir_value *e[3];
  int first = g->n_nodes;
  ad_norm_grad_prims(c, n, e);
  int last = g->n_nodes, bound = ir_graph_id_bound(g); /* the new values' ids index the arrays too */
  bool *active = calloc((size_t)bound, sizeof *active);
  ir_value **ct = calloc((size_t)bound, sizeof *ct);
  if (!active || !ct) IR_DIE("out of memory (active || !ct)");
  for (int i = 0; i < n->n_in; i++) active[n->in[i]->id] |= NEED(i);
  mark_active(g, first, last, active);
  for (int j = 0; j < n->n_out; j++) /* e[j] may be an operand itself (dbeta = dy at rank 1) */
    if (gy[j] && active[e[j]->id]) ct[e[j]->id] = ad_add(c, ct[e[j]->id], gy[j], NULL);
  for (int k = last - 1; k >= first; k--)
    if (vjp_node(g, g->nodes[k], active, ct)) abort(); /* every primitive it writes has a rule */
  for (int i = 0; i < n->n_in; i++) {
    bool again = false; /* an operand given twice (x as dy) gets its whole gradient once */
    for (int j = 0; j < i; j++) again |= n->in[j] == n->in[i];
    if (NEED(i) && !again) gx[i] = ct[n->in[i]->id];
  }
  free(active);
  free(ct);
}

int pass_vjp(ir_graph *g, ir_value *loss, ir_value *const *wrt, int n, ir_value **grads, ir_diag *d) {
  if (!loss || loss->type.rank != 0 || !ir_dtype_is_float(loss->type.dtype)) {
    char tb[128] = "nothing";
    if (loss) ir_type_str(&loss->type, tb, sizeof tb);
    ir_error(d, loss ? loss->loc : (ir_loc){0}, "gradients need a scalar floating-point loss, got %s", tb);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (!ir_dtype_is_float(wrt[i]->type.dtype)) {
      ir_error(d, wrt[i]->loc, "cannot differentiate with respect to %%%s: only floating-point values have gradients",
               wrt[i]->name);
      return -1;
    }
  int nv = ir_graph_id_bound(g), nn = g->n_nodes, rc = 0;
  bool *active = calloc((size_t)nv, sizeof *active);
  ir_value **ct = calloc((size_t)nv, sizeof *ct);
  if (!active || !ct) IR_DIE("out of memory (active || !ct)");
  for (int i = 0; i < n; i++) active[wrt[i]->id] = true;
  mark_active(g, 0, nn, active);
  int loss_at = -1;
  for (int k = 0; k < nn; k++)
    if (!g->nodes[k]->dead && g->nodes[k] == loss->def) loss_at = k;
  if (active[loss->id]) {
    ad_ctx c = {.g = g, .fwd = loss->def, .loc = loss->loc};
    ct[loss->id] = ad_fill(&c, &loss->type, 1.0, ad_prefixed(g, "d_", loss));
  }
  for (int k = loss_at; k >= 0; k--) {
    ir_node *nd = g->nodes[k];
    const char *why = nd->dead ? NULL : vjp_node(g, nd, active, ct);
    if (why) {
      ir_error(d, nd->loc, "cannot differentiate %s%s: '%s' is %s", nd->n_out ? "%" : "",
               nd->n_out ? nd->out[0]->name : ir_op_name(nd->op), ir_op_name(nd->op), why);
      rc = -1;
      break;
    }
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    grads[i] = ct[wrt[i]->id];
    if (!grads[i]) {
      ad_ctx c = {.g = g, .fwd = wrt[i]->def, .loc = wrt[i]->loc};
      grads[i] = ad_fill(&c, &wrt[i]->type, 0.0, ad_prefixed(g, "d_", wrt[i]));
    }
  }
  free(active);
  free(ct);
  return rc;
}
