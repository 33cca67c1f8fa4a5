/* passes/autodiff_build.c — node builders for the VJP/JVP rules, and the
 * derivative pieces reverse and forward mode share (see autodiff_impl.h).
 *
 * Elementwise ops have diagonal Jacobians, so one function computes
 * v * f'(x) for both modes: reverse passes the cotangent, forward the
 * tangent. Binary ops likewise give v * dy/da and v * dy/db in the broadcast
 * shape; reverse mode then sums over broadcast axes (ad_unbroadcast), forward
 * mode broadcasts (ad_fit). Norm statistics are recomputed in primitives
 * (mean, rsqrt) from the forward operands, like the forward kernel does;
 * the norms' fused backward is written in primitives too
 * (ad_norm_grad_prims) when it is differentiated itself.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "autodiff_impl.h"

static void mark(ad_ctx *c, ir_node *n) {
  n->layer = c->fwd ? c->fwd->layer : -1;
  for (int i = 0; i < n->n_out; i++) n->out[i]->role = IR_ROLE_GRAD;
}

static ir_loc loc_of(const ad_ctx *c) { return c->fwd ? c->fwd->loc : c->loc; }

ir_value *ad_op(ad_ctx *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs,
                const char *name) {
  ir_value *v = ir_graph_build1(c->g, op, in, n_in, attrs, n_attrs, name, loc_of(c));
  mark(c, v->def);
  return v;
}

void ad_op_multi(ad_ctx *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs,
                 const char *const *names, ir_value **outs) {
  ir_type tin[IR_MAX_RANK * 2 + 2], tout[64];
  int n_out = 0;
  char err[512];
  if (n_in > (int)(sizeof tin / sizeof tin[0])) abort();
  for (int i = 0; i < n_in; i++) tin[i] = in[i]->type;
  const ir_attr *sizes = NULL;
  for (int i = 0; i < n_attrs; i++)
    if (attrs[i].kind == IR_ATTR_INTS) sizes = &attrs[i];
  ir_type *out = tout;
  if (sizes && sizes->n > 64) out = malloc((size_t)sizes->n * sizeof *out);
  if (!out) IR_DIE("out of memory (out)");
  if (ir_infer(op, tin, n_in, attrs, n_attrs, out, &n_out, err, sizeof err) != 0) {
    fprintf(stderr, "tgc: internal error: autodiff building %s: %s\n", ir_op_name(op), err);
    abort();
  }
  ir_node *n = ir_graph_add_node(c->g, op, in, n_in, out, n_out, attrs, n_attrs, names, loc_of(c));
  mark(c, n);
  for (int i = 0; i < n_out; i++) outs[i] = n->out[i];
  if (out != tout) free(out);
}

ir_value *ad_un(ad_ctx *c, ir_op op, ir_value *x, const char *name) { return ad_op(c, op, &x, 1, NULL, 0, name); }

ir_value *ad_bin(ad_ctx *c, ir_op op, ir_value *a, ir_value *b, const char *name) {
  ir_value *in[2] = {a, b};
  return ad_op(c, op, in, 2, NULL, 0, name);
}

ir_value *ad_fill(ad_ctx *c, const ir_type *t, double v, const char *name) {
  ir_attr a = ir_attr_float("value", v);
  char err[256];
  ir_node *n = ir_graph_build(c->g, IR_OP_CONST, NULL, 0, &a, 1, t, name, loc_of(c), err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: autodiff building const: %s\n", err);
    abort();
  }
  mark(c, n);
  return n->out[0];
}

ir_attr ad_node_attr(const ir_node *n, const char *key) {
  const ir_attr *a = ir_node_attr(n, key);
  if (a->kind == IR_ATTR_MESH_AXIS) return ir_attr_mesh_axis(key, (ir_axis)a->i);
  return a->kind == IR_ATTR_STR ? ir_attr_str(key, a->s) : ir_attr_int(key, a->i);
}

ir_value *ad_recv(ad_ctx *c, const ir_type *t, const ir_attr *attrs, int n_attrs, const char *name) {
  char err[256];
  ir_node *n = ir_graph_build(c->g, IR_OP_RECV, NULL, 0, attrs, n_attrs, t, name, loc_of(c), err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: autodiff building recv: %s\n", err);
    abort();
  }
  mark(c, n);
  return n->out[0];
}

void ad_send(ad_ctx *c, ir_value *x, const ir_attr *attrs, int n_attrs) {
  char err[256];
  ir_node *n = ir_graph_build(c->g, IR_OP_SEND, &x, 1, attrs, n_attrs, NULL, NULL, loc_of(c), err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: autodiff building send: %s\n", err);
    abort();
  }
  mark(c, n);
}

const char *ad_node_nondiff(const ir_node *n) {
  if (n->op == IR_OP_ATTENTION && n->n_in == 4) return "a decode step over a KV cache (its qpos operand has no derivative rule)";
  if (n->op != IR_OP_ALL_REDUCE && n->op != IR_OP_REDUCE_SCATTER) return NULL;
  const ir_attr *r = ir_node_attr(n, "reduce");
  return r && r->kind == IR_ATTR_STR && strcmp(r->s, "max") == 0 ? "a maximum over ranks (reduce = \"max\")" : NULL;
}

ir_value *ad_scalar(ad_ctx *c, ir_dtype dt, double v) {
  ir_type t = {.dtype = dt, .rank = 0};
  return ad_fill(c, &t, v, NULL);
}

ir_value *ad_where(ad_ctx *c, ir_value *cond, ir_value *a, ir_value *b, const char *name) {
  ir_value *in[3] = {cond, a, b};
  return ad_op(c, IR_OP_WHERE, in, 3, NULL, 0, name);
}

ir_value *ad_reduce(ad_ctx *c, ir_op op, ir_value *x, const int64_t *axes, int n_axes, bool keepdims,
                    const char *name) {
  ir_attr a[2] = {ir_attr_ints("axes", axes, n_axes), ir_attr_int("keepdims", keepdims)};
  return ad_op(c, op, &x, 1, a, 2, name);
}

ir_value *ad_last_mean(ad_ctx *c, ir_value *x) {
  int64_t ax = x->type.rank - 1;
  return ad_reduce(c, IR_OP_REDUCE_MEAN, x, &ax, 1, true, NULL);
}

ir_value *ad_last_sum(ad_ctx *c, ir_value *x, int axis) {
  int64_t ax = axis;
  return ad_reduce(c, IR_OP_REDUCE_SUM, x, &ax, 1, true, NULL);
}

ir_value *ad_reshape(ad_ctx *c, ir_value *x, const int64_t *dims, int rank, const char *name) {
  ir_attr a = ir_attr_ints("shape", dims, rank);
  return ad_op(c, IR_OP_RESHAPE, &x, 1, &a, 1, name);
}

ir_value *ad_broadcast(ad_ctx *c, ir_value *x, const ir_type *t, const char *name) {
  ir_attr a = ir_attr_ints("shape", t->dims, t->rank);
  return ad_op(c, IR_OP_BROADCAST, &x, 1, &a, 1, name);
}

ir_value *ad_transpose(ad_ctx *c, ir_value *x, const int64_t *perm, const char *name) {
  ir_attr a = ir_attr_ints("perm", perm, x->type.rank);
  return ad_op(c, IR_OP_TRANSPOSE, &x, 1, &a, 1, name);
}

ir_value *ad_swap_last2_named(ad_ctx *c, ir_value *x, const char *name) {
  int64_t perm[IR_MAX_RANK];
  int r = x->type.rank;
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return ad_transpose(c, x, perm, name);
}

ir_value *ad_swap_last2(ad_ctx *c, ir_value *x) { return ad_swap_last2_named(c, x, NULL); }

ir_value *ad_repeat_kv(ad_ctx *c, ir_value *kv, int64_t hq) {
  const ir_type *t = &kv->type;
  int r = t->rank;
  int64_t hkv = t->dims[r - 3], d5[IR_MAX_RANK + 1];
  if (hkv == hq) return kv;
  for (int i = 0; i < r - 2; i++) d5[i] = t->dims[i];
  d5[r - 2] = 1, d5[r - 1] = t->dims[r - 2], d5[r] = t->dims[r - 1]; /* [.., Hkv, 1, S, E] */
  ir_value *x = ad_reshape(c, kv, d5, r + 1, NULL);
  ir_type bt = x->type;
  bt.dims[r - 2] = hq / hkv;
  x = ad_broadcast(c, x, &bt, NULL);
  ir_type out = *t;
  out.dims[r - 3] = hq;
  return ad_reshape(c, x, out.dims, r, NULL);
}

ir_value *ad_sum_kv(ad_ctx *c, ir_value *g, int64_t hkv, const char *name) {
  const ir_type *t = &g->type;
  int r = t->rank;
  int64_t hq = t->dims[r - 3], d5[IR_MAX_RANK + 1];
  if (hkv == hq) return g;
  for (int i = 0; i < r - 3; i++) d5[i] = t->dims[i];
  d5[r - 3] = hkv, d5[r - 2] = hq / hkv, d5[r - 1] = t->dims[r - 2], d5[r] = t->dims[r - 1]; /* [.., Hkv, G, S, E] */
  int64_t axis = r - 2;
  return ad_reduce(c, IR_OP_REDUCE_SUM, ad_reshape(c, g, d5, r + 1, NULL), &axis, 1, false, name);
}

ir_value *ad_cast(ad_ctx *c, ir_value *x, ir_dtype to, const char *name) {
  if (x->type.dtype == to) return x;
  ir_attr a = ir_attr_dtype("to", to);
  return ad_op(c, IR_OP_CAST, &x, 1, &a, 1, name);
}

ir_value *ad_slice(ad_ctx *c, ir_value *x, int axis, int64_t start, int64_t end, int64_t step, const char *name) {
  ir_attr a[4] = {ir_attr_int("axis", axis), ir_attr_int("start", start), ir_attr_int("end", end),
                  ir_attr_int("step", step)};
  return ad_op(c, IR_OP_SLICE, &x, 1, a, step == 1 ? 3 : 4, name);
}

bool ad_same_dims(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

ir_value *ad_unbroadcast(ad_ctx *c, ir_value *v, const ir_type *t, const char *name) {
  if (ad_same_dims(&v->type, t)) return v;
  int R = v->type.rank, off = R - t->rank, n = 0;
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < R; i++)
    if (i < off || (t->dims[i - off] == 1 && v->type.dims[i] != 1)) axes[n++] = i;
  ir_type reduced = {.dtype = v->type.dtype};
  for (int i = 0, j = 0; i < R; i++) {
    if (j < n && axes[j] == i) j++;
    else reduced.dims[reduced.rank++] = v->type.dims[i];
  }
  bool reshape = !ad_same_dims(&reduced, t);
  ir_value *s = n ? ad_reduce(c, IR_OP_REDUCE_SUM, v, axes, n, false, reshape ? NULL : name) : v;
  return reshape ? ad_reshape(c, s, t->dims, t->rank, name) : s;
}

ir_value *ad_fit(ad_ctx *c, ir_value *v, const ir_type *t, const char *name) {
  if (ad_same_dims(&v->type, t)) return v;
  return ad_broadcast(c, v, t, name);
}

ir_value *ad_add(ad_ctx *c, ir_value *a, ir_value *b, const char *name) {
  if (!a) return b;
  if (!b) return a;
  return ad_bin(c, IR_OP_ADD, a, b, name);
}

const char *ad_prefixed(ir_graph *g, const char *prefix, const ir_value *v) {
  const char *base = v && v->name ? v->name : "";
  size_t n = strlen(prefix) + strlen(base) + 1;
  char *s = ir_arena_alloc(g->arena, n);
  snprintf(s, n, "%s%s", prefix, base);
  return s;
}

/* ---- derivative pieces ---- */
#define K(v) ad_scalar(c, dt, (v))

ir_value *ad_gelu_second(ad_ctx *c, ir_value *x) {
  /* gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u',  t = tanh(u), u = c0 (x + a x^3), u' = c0 (1 + 3 a x^2)
   * gelu''(x) = (1 - t^2) (u' - x t u'^2 + 3 a c0 x^2) */
  const double c0 = 0.7978845608028654, a = 0.044715;
  ir_dtype dt = x->type.dtype;
  ir_value *x2 = ad_un(c, IR_OP_SQUARE, x, NULL);
  ir_value *up = ad_bin(c, IR_OP_ADD, K(c0), ad_bin(c, IR_OP_MUL, K(3 * a * c0), x2, NULL), NULL);
  ir_value *u = ad_bin(c, IR_OP_MUL, x, ad_bin(c, IR_OP_ADD, K(c0), ad_bin(c, IR_OP_MUL, K(a * c0), x2, NULL), NULL), NULL);
  ir_value *t = ad_un(c, IR_OP_TANH, u, NULL);
  ir_value *s = ad_bin(c, IR_OP_SUB, K(1), ad_un(c, IR_OP_SQUARE, t, NULL), NULL);
  ir_value *xtu2 = ad_bin(c, IR_OP_MUL, ad_bin(c, IR_OP_MUL, x, t, NULL), ad_un(c, IR_OP_SQUARE, up, NULL), NULL);
  ir_value *inner = ad_bin(c, IR_OP_ADD, ad_bin(c, IR_OP_SUB, up, xtu2, NULL),
                           ad_bin(c, IR_OP_MUL, K(3 * a * c0), x2, NULL), NULL);
  return ad_bin(c, IR_OP_MUL, s, inner, NULL);
}

ir_value *ad_unary_apply(ad_ctx *c, ir_value *v, const char *name) {
  const ir_node *n = c->fwd;
  ir_value *x = n->in[0], *y = n->out[0];
  ir_dtype dt = x->type.dtype;
  switch (n->op) {
  case IR_OP_NEG: return ad_un(c, IR_OP_NEG, v, name);
  case IR_OP_ABS: return ad_bin(c, IR_OP_MUL, v, ad_un(c, IR_OP_SIGN, x, NULL), name);
  case IR_OP_EXP: return ad_bin(c, IR_OP_MUL, v, y, name);
  case IR_OP_LOG: return ad_bin(c, IR_OP_DIV, v, x, name);
  case IR_OP_SQRT: return ad_bin(c, IR_OP_DIV, v, ad_bin(c, IR_OP_MUL, K(2), y, NULL), name);
  case IR_OP_RSQRT: /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
    return ad_bin(c, IR_OP_MUL, v,
                  ad_bin(c, IR_OP_MUL, K(-0.5), ad_bin(c, IR_OP_MUL, y, ad_un(c, IR_OP_SQUARE, y, NULL), NULL), NULL),
                  name);
  case IR_OP_SIN: return ad_bin(c, IR_OP_MUL, v, ad_un(c, IR_OP_COS, x, NULL), name);
  case IR_OP_COS: return ad_un(c, IR_OP_NEG, ad_bin(c, IR_OP_MUL, v, ad_un(c, IR_OP_SIN, x, NULL), NULL), name);
  case IR_OP_TANH:
    return ad_bin(c, IR_OP_MUL, v, ad_bin(c, IR_OP_SUB, K(1), ad_un(c, IR_OP_SQUARE, y, NULL), NULL), name);
  case IR_OP_SIGMOID:
    return ad_bin(c, IR_OP_MUL, v, ad_bin(c, IR_OP_MUL, y, ad_bin(c, IR_OP_SUB, K(1), y, NULL), NULL), name);
  case IR_OP_RELU: return ad_where(c, ad_bin(c, IR_OP_GT, x, K(0), NULL), v, K(0), name);
  case IR_OP_GELU: return ad_bin(c, IR_OP_MUL, v, ad_un(c, IR_OP_GELU_GRAD, x, NULL), name);
  case IR_OP_SILU: { /* d x s(x) = s (1 + x (1 - s)) */
    ir_value *s = ad_un(c, IR_OP_SIGMOID, x, NULL);
    ir_value *one_m = ad_bin(c, IR_OP_SUB, K(1), s, NULL);
    ir_value *d = ad_bin(c, IR_OP_MUL, s, ad_bin(c, IR_OP_ADD, K(1), ad_bin(c, IR_OP_MUL, x, one_m, NULL), NULL), NULL);
    return ad_bin(c, IR_OP_MUL, v, d, name);
  }
  case IR_OP_SQUARE: return ad_bin(c, IR_OP_MUL, v, ad_bin(c, IR_OP_MUL, K(2), x, NULL), name);
  case IR_OP_ERF: /* d erf x = 2/sqrt(pi) e^-x^2 */
    return ad_bin(c, IR_OP_MUL, v,
                  ad_bin(c, IR_OP_MUL, K(1.1283791670955126), ad_un(c, IR_OP_EXP, ad_un(c, IR_OP_NEG, ad_un(c, IR_OP_SQUARE, x, NULL), NULL), NULL), NULL),
                  name);
  case IR_OP_SIGN: return NULL; /* piecewise constant */
  case IR_OP_GELU_GRAD: return ad_bin(c, IR_OP_MUL, v, ad_gelu_second(c, x), name);
  default: break;
  }
  fprintf(stderr, "tgc: internal error: ad_unary_apply on %s\n", ir_op_name(n->op));
  abort();
}

ir_value *ad_binary_apply(ad_ctx *c, int i, ir_value *v, const char *name) {
  const ir_node *n = c->fwd;
  ir_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
  ir_dtype dt = a->type.dtype;
  switch (n->op) {
  case IR_OP_ADD: return v;
  case IR_OP_SUB: return i == 0 ? v : ad_un(c, IR_OP_NEG, v, name);
  case IR_OP_MUL: return ad_bin(c, IR_OP_MUL, v, i == 0 ? b : a, name);
  case IR_OP_DIV: /* d/da = 1/b, d/db = -y/b */
    if (i == 0) return ad_bin(c, IR_OP_DIV, v, b, name);
    return ad_un(c, IR_OP_NEG, ad_bin(c, IR_OP_DIV, ad_bin(c, IR_OP_MUL, v, y, NULL), b, NULL), name);
  case IR_OP_POW: /* d/da = b a^(b-1), d/db = log(a) y */
    if (i == 0)
      return ad_bin(c, IR_OP_MUL, v,
                    ad_bin(c, IR_OP_MUL, b, ad_bin(c, IR_OP_POW, a, ad_bin(c, IR_OP_SUB, b, K(1), NULL), NULL), NULL),
                    name);
    return ad_bin(c, IR_OP_MUL, v, ad_bin(c, IR_OP_MUL, ad_un(c, IR_OP_LOG, a, NULL), y, NULL), name);
  case IR_OP_MAXIMUM: case IR_OP_MINIMUM: { /* ties go to a */
    ir_value *mask = ad_bin(c, n->op == IR_OP_MAXIMUM ? IR_OP_GE : IR_OP_LE, a, b, NULL);
    return i == 0 ? ad_where(c, mask, v, K(0), name) : ad_where(c, mask, K(0), v, name);
  }
  default: break;
  }
  fprintf(stderr, "tgc: internal error: ad_binary_apply on %s\n", ir_op_name(n->op));
  abort();
}

void ad_norm_stats(ad_ctx *c, bool ln, ir_value *x, double eps, ir_value **xhat, ir_value **rstd) {
  ir_dtype dt = x->type.dtype;
  ir_value *xc = x, *var;
  if (ln) {
    xc = ad_bin(c, IR_OP_SUB, x, ad_last_mean(c, x), NULL);
    var = ad_last_mean(c, ad_un(c, IR_OP_SQUARE, xc, NULL));
  } else {
    var = ad_last_mean(c, ad_un(c, IR_OP_SQUARE, x, NULL));
  }
  *rstd = ad_un(c, IR_OP_RSQRT, ad_bin(c, IR_OP_ADD, var, K(eps), NULL), NULL);
  *xhat = ad_bin(c, IR_OP_MUL, xc, *rstd, NULL);
}

/* Sum over every axis but the last: [..., D] -> [D]. */
static ir_value *sum_leading(ad_ctx *c, ir_value *v, const char *name) {
  int64_t axes[IR_MAX_RANK];
  int r = v->type.rank;
  for (int i = 0; i < r - 1; i++) axes[i] = i;
  return r > 1 ? ad_reduce(c, IR_OP_REDUCE_SUM, v, axes, r - 1, false, name) : v;
}

void ad_norm_grad_prims(ad_ctx *c, const ir_node *n, ir_value **out) {
  bool ln = n->op == IR_OP_LAYERNORM_GRAD;
  ir_value *x = n->in[0], *gamma = n->in[1], *dy = n->in[2], *xhat, *rstd;
  const char *names[3] = {n->out[0]->name, n->out[1]->name, ln ? n->out[2]->name : NULL};
  ad_norm_stats(c, ln, x, ir_node_attr_float(n, "eps", 1e-5), &xhat, &rstd);
  out[1] = sum_leading(c, ad_bin(c, IR_OP_MUL, dy, xhat, x->type.rank > 1 ? NULL : names[1]), names[1]);
  if (ln) out[2] = sum_leading(c, dy, names[2]);
  ir_value *gh = ad_bin(c, IR_OP_MUL, dy, gamma, NULL);
  ir_value *m2 = ad_last_mean(c, ad_bin(c, IR_OP_MUL, gh, xhat, NULL));
  ir_value *t = ad_bin(c, IR_OP_SUB, gh, ad_bin(c, IR_OP_MUL, xhat, m2, NULL), NULL);
  if (ln) t = ad_bin(c, IR_OP_SUB, t, ad_last_mean(c, gh), NULL);
  out[0] = ad_bin(c, IR_OP_MUL, rstd, t, names[0]);
}

ir_value *ad_softmax_jvp(ad_ctx *c, ir_value *s, ir_value *v, int axis, const char *name) {
  ir_value *dot = ad_last_sum(c, ad_bin(c, IR_OP_MUL, v, s, NULL), axis);
  return ad_bin(c, IR_OP_MUL, s, ad_bin(c, IR_OP_SUB, v, dot, NULL), name);
}

bool ad_einsum_terms(const ir_einsum *eq, int n_in, ad_einsum_eq *e) {
  memset(e, 0, sizeof *e);
  if (!eq || n_in < 1 || eq->n_terms != n_in || n_in > (int)(sizeof e->terms / sizeof e->terms[0])) return false;
  for (int t = 0; t < n_in; t++) {
    int len = eq->start[t + 1] - eq->start[t];
    if (len > IR_MAX_RANK) return false;
    for (int k = 0; k < len; k++) e->terms[t][k] = ir_einsum_letter(eq->labels[eq->start[t] + k]);
  }
  if (eq->out_len > IR_MAX_RANK) return false;
  for (int k = 0; k < eq->out_len; k++) e->out[k] = ir_einsum_letter(eq->out[k]);
  e->n = n_in;
  return true;
}
