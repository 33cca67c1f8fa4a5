/* passes/autodiff_impl.h — private to the autodiff files of passes/
 * (autodiff.c, autodiff_build.c, vjp.c, jvp.c): the node builders the VJP
 * and JVP rules are written with, and the derivative pieces both modes share.
 *
 * Every builder appends one node at the end of the graph with the location
 * and layer of the forward node being differentiated (ad_ctx.fwd) and gives
 * its results role IR_ROLE_GRAD. `name` is a name hint ("d_x", "t_y") for
 * the value a rule hands back, NULL for temporaries. A builder whose operand
 * types do not fit is an internal error (ir_graph_build1 aborts with the
 * message): the rules only build well-typed nodes from verified graphs.
 */
#ifndef TGC_AUTODIFF_IMPL_H
#define TGC_AUTODIFF_IMPL_H

#include "pass.h"

typedef struct {
  ir_graph *g;
  const ir_node *fwd;   /* the forward node a rule differentiates: loc, layer */
  ir_loc loc;           /* used when fwd is NULL (seeds and zeros of inputs) */
  const bool *need;     /* VJP: need[i] — operand i of fwd wants a gradient */
  const char *const *dn; /* VJP: "d_<operand i>"; JVP: "t_<result i>" */
} ad_ctx;

/* ---- builders (autodiff_build.c) ---- */
ir_value *ad_op(ad_ctx *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs,
                const char *name);
/* A node with several results named names[i]; fills outs[]. */
void ad_op_multi(ad_ctx *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs,
                 const char *const *names, ir_value **outs);
ir_value *ad_un(ad_ctx *c, ir_op op, ir_value *x, const char *name);
ir_value *ad_bin(ad_ctx *c, ir_op op, ir_value *a, ir_value *b, const char *name);
ir_value *ad_scalar(ad_ctx *c, ir_dtype dt, double v);
ir_value *ad_fill(ad_ctx *c, const ir_type *t, double v, const char *name);
ir_value *ad_where(ad_ctx *c, ir_value *cond, ir_value *a, ir_value *b, const char *name);
ir_value *ad_reduce(ad_ctx *c, ir_op op, ir_value *x, const int64_t *axes, int n_axes, bool keepdims,
                    const char *name);
/* reduce over the last axis, keepdims */
ir_value *ad_last_mean(ad_ctx *c, ir_value *x);
ir_value *ad_last_sum(ad_ctx *c, ir_value *x, int axis);
ir_value *ad_reshape(ad_ctx *c, ir_value *x, const int64_t *dims, int rank, const char *name);
ir_value *ad_broadcast(ad_ctx *c, ir_value *x, const ir_type *t, const char *name);
ir_value *ad_transpose(ad_ctx *c, ir_value *x, const int64_t *perm, const char *name);
ir_value *ad_swap_last2(ad_ctx *c, ir_value *x);
/* Grouped-query attention's kv heads: kv [.., Hkv, S, E] repeated to
 * [.., Hq, S, E] (query head h reads kv head h / (Hq / Hkv)); the adjoint,
 * g [.., Hq, S, E] summed over each group to [.., Hkv, S, E]. Identities
 * when Hkv = Hq. */
ir_value *ad_repeat_kv(ad_ctx *c, ir_value *kv, int64_t hq);
ir_value *ad_sum_kv(ad_ctx *c, ir_value *g, int64_t hkv, const char *name);
ir_value *ad_swap_last2_named(ad_ctx *c, ir_value *x, const char *name);
ir_value *ad_cast(ad_ctx *c, ir_value *x, ir_dtype to, const char *name);
ir_value *ad_slice(ad_ctx *c, ir_value *x, int axis, int64_t start, int64_t end, int64_t step, const char *name);
/* Adjoint of numpy broadcasting: sums v over the axes t was broadcast along,
 * then reshapes to t (returns v when it already has t's dims). */
ir_value *ad_unbroadcast(ad_ctx *c, ir_value *v, const ir_type *t, const char *name);
/* Broadcasts v to t's dims when they differ (tangents of broadcast operands). */
ir_value *ad_fit(ad_ctx *c, ir_value *v, const ir_type *t, const char *name);
/* a + b, either may be NULL (zero). */
ir_value *ad_add(ad_ctx *c, ir_value *a, ir_value *b, const char *name);
bool ad_same_dims(const ir_type *a, const ir_type *b);
/* "prefix" + v's name, in the graph arena. */
const char *ad_prefixed(ir_graph *g, const char *prefix, const ir_value *v);

/* Attribute key of n (an INT or STR one) to build another node with. */
ir_attr ad_node_attr(const ir_node *n, const char *key);
/* A recv of type t from the peer in attrs (axis, n, peer), and a send of x. */
ir_value *ad_recv(ad_ctx *c, const ir_type *t, const ir_attr *attrs, int n_attrs, const char *name);
void ad_send(ad_ctx *c, ir_value *x, const ir_attr *attrs, int n_attrs);
/* Why this node is not differentiable although its op has a rule (a max
 * over ranks: all_reduce / reduce_scatter with reduce = "max"), or NULL. */
const char *ad_node_nondiff(const ir_node *n);

/* ---- derivative pieces shared by both modes (autodiff_build.c) ---- */
/* v * f'(x) for a unary elementwise fwd node (not cast); NULL = zero (sign). */
ir_value *ad_unary_apply(ad_ctx *c, ir_value *v, const char *name);
/* v * dy/d(operand i) for a binary elementwise fwd node, in the broadcast
 * shape of v and the operands (not reduced). */
ir_value *ad_binary_apply(ad_ctx *c, int i, ir_value *v, const char *name);
/* gelu''(x) of the tanh form, in primitives. */
ir_value *ad_gelu_second(ad_ctx *c, ir_value *x);
/* layernorm (ln) / rmsnorm statistics of x: xhat (normalized x) and rstd. */
void ad_norm_stats(ad_ctx *c, bool ln, ir_value *x, double eps, ir_value **xhat, ir_value **rstd);
/* n, a layernorm_grad / rmsnorm_grad, written in primitives (the formula
 * of docs/ir.md, as the autodiff wrote the norms' backward before the fused
 * ops): out[j] is n's result j (dx, dgamma, dbeta), named after it. The two
 * ops' VJP and JVP rules differentiate this. For a rank-1 x, dbeta is dy. */
void ad_norm_grad_prims(ad_ctx *c, const ir_node *n, ir_value **out);
/* softmax Jacobian-vector product s * (v - sum(v * s, axis, keepdims)). */
ir_value *ad_softmax_jvp(ad_ctx *c, ir_value *s, ir_value *v, int axis, const char *name);
/* einsum equation of fwd split into terms: terms[i] for operand i, out. */
typedef struct {
  char terms[IR_MAX_RANK * 2][IR_MAX_RANK + 1];
  char out[IR_MAX_RANK + 1];
  int n;
} ad_einsum_eq;
/* The terms of a parsed equation as letter strings; false if it does not fit n_in operands. */
bool ad_einsum_terms(const ir_einsum *eq, int n_in, ad_einsum_eq *e);

/* ---- rule tables (vjp.c, jvp.c): for the missing-rule tests ----
 * Returns true if op has a rule; else *why says why it is not
 * differentiable (NULL: neither — a gap the tests report). */
bool pass_vjp_has_rule(ir_op op, const char **why);
bool pass_jvp_has_rule(ir_op op, const char **why);

#endif
