/* tests/unit/test_autodiff.c — reverse and forward mode against finite
 * differences, op by op, and the autodiff pass.
 *
 *  - missing rules: every op of ops.def has a VJP and a JVP rule or an
 *    explicit reason it is not differentiable, the same in both modes;
 *  - all ops, f64: for every differentiable op (and several variants:
 *    broadcasting, keepdims, repeated einsum letters, ...) a small graph
 *    loss = sum_j sum(out_j * W_j) with random W_j; pass_vjp's gradient and
 *    pass_jvp's directional derivative (one unit tangent per element) are
 *    compared with central differences (h = 1e-6 max(1, |x|)) of every
 *    element of every float input. Tolerance: max abs error <= 1e-6 times the
 *    largest |finite difference| of the case (norm-wise rel <= 1e-6);
 *  - all ops, f32: random tangents t and the random weights as cotangent c,
 *    <t, J^T c> = <J t, c> within 1e-4 of sum |t_i (J^T c)_i| (f32 rounding
 *    of both sides);
 *  - the autodiff pass: grad nodes expanded in place, names d_<value>, role
 *    grad, forward locations and layers, zeros for unrelated values, a
 *    second-order grad, and the clear error for an unexpanded grad;
 *  - a second derivative through the norms' fused backward (layernorm_grad,
 *    rmsnorm_grad, also cases of the loop above): reverse over reverse and
 *    forward over reverse against central differences (rel <= 1e-6), and
 *    against the graph with the fused ops written in primitives before the
 *    second grad (rel <= 1e-12);
 *  - the classic exercise y1 = (x1+x2)^2, y2 = (x1-x2)^2 at (2, 4).
 */
#include <stdlib.h>
#include <string.h>

#include "autodiff_impl.h"
#include "check.h"
#include "runtime.h"

static ir_loc L(int line) { return (ir_loc){NULL, line, 1}; }

static ir_type T(ir_dtype dt, int rank, const int64_t *dims) {
  ir_type t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}
#define TY(dt, ...) T(dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define SCALAR(dt) T(dt, 0, NULL)

/* ---- the missing-rule loop ---- */
static void test_rule_tables(void) {
  for (int op = 0; op < IR_NUM_OPS; op++) {
    const char *why_v = NULL, *why_j = NULL;
    bool v = pass_vjp_has_rule((ir_op)op, &why_v), j = pass_jvp_has_rule((ir_op)op, &why_j);
    if (!v && !why_v) fprintf(stderr, "op %s has no VJP rule and no non-differentiable marking\n", ir_op_name((ir_op)op));
    if (!j && !why_j) fprintf(stderr, "op %s has no JVP rule and no non-differentiable marking\n", ir_op_name((ir_op)op));
    CHECK(v || why_v);
    CHECK(j || why_j);
    CHECK_EQ_INT(v, j); /* differentiable in one mode means in both */
  }
}

/* ---- one-op cases ---- */
enum { K_NORMAL, K_POSITIVE, K_INT, K_AWAY }; /* how an input is filled */

typedef struct {
  ir_graph *g;
  ir_value *in[8];
  int kind[8];
  int64_t high[8];
  int n_in;
  ir_value *out[8];
  int n_out;
  bool skip_out[8]; /* results left out of the loss */
} tcase;

static ir_value *inp(tcase *c, ir_type t, int kind, int64_t high) {
  char name[32];
  snprintf(name, sizeof name, "x%d", c->n_in);
  ir_value *v = ir_graph_add_input(c->g, name, t, L(1));
  c->kind[c->n_in] = kind;
  c->high[c->n_in] = high;
  c->in[c->n_in++] = v;
  return v;
}

static void node(tcase *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs) {
  char err[512];
  ir_node *n = ir_graph_build(c->g, op, in, n_in, attrs, n_attrs, NULL, "y", L(2), err, sizeof err);
  if (!n) {
    fprintf(stderr, "building %s: %s\n", ir_op_name(op), err);
    abort();
  }
  for (int j = 0; j < n->n_out; j++) c->out[c->n_out++] = n->out[j];
}

static ir_value *node1(tcase *c, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs, int n_attrs) {
  return ir_graph_build1(c->g, op, in, n_in, attrs, n_attrs, NULL, L(2));
}

static const char *einsum_eqs[] = {"ij,jk->ik", "bij,bjk->bik", "ii->i", "ij->", "i,j->ij", "ij,k->i",
                                   "bqhd,bkhd->bhqk", "iij,jk->ki"};
static const int64_t einsum_dims[][2][4] = {
    {{2, 3}, {3, 4}}, {{2, 2, 3}, {2, 3, 2}}, {{3, 3}, {0}}, {{2, 3}, {0}},
    {{3}, {4}},       {{2, 3}, {4}},          {{1, 2, 2, 3}, {1, 3, 2, 3}}, {{2, 2, 3}, {3, 2}}};
static const int einsum_ranks[][2] = {{2, 2}, {3, 3}, {2, 0}, {2, 0}, {1, 1}, {2, 1}, {4, 4}, {3, 2}};

/* Builds variant `var` of a case for op in dtype dt; false when op has no
 * such variant (or is not differentiable). */
static bool build_case(ir_op op, int var, ir_dtype dt, tcase *c) {
  memset(c, 0, sizeof *c);
  c->g = ir_graph_new("case", "case.tg");
  ir_value *a, *b, *x;
  switch (op) {
  case IR_OP_CAST: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    ir_attr at = ir_attr_dtype("to", IR_DT_F64);
    node(c, op, &x, 1, &at, 1);
    return true;
  }
  case IR_OP_WHERE: {
    if (var > 0) break;
    ir_value *s = inp(c, TY(dt, 2, 3), K_AWAY, 0);
    a = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    b = inp(c, TY(dt, 3), K_NORMAL, 0);
    ir_value *zero = ir_graph_build(c->g, IR_OP_CONST, NULL, 0, &(ir_attr){.key = "value", .kind = IR_ATTR_FLOAT},
                                    1, &(ir_type){.dtype = dt}, NULL, L(2), NULL, 0)->out[0];
    ir_value *cmp[2] = {s, zero};
    ir_value *in[3] = {node1(c, IR_OP_GT, cmp, 2, NULL, 0), a, b};
    node(c, op, in, 3, NULL, 0);
    return true;
  }
  case IR_OP_MATMUL: {
    if (var > 1) break;
    a = inp(c, var ? TY(dt, 3, 4) : TY(dt, 2, 3, 4), K_NORMAL, 0);
    b = inp(c, var ? TY(dt, 2, 4, 2) : TY(dt, 4, 5), K_NORMAL, 0);
    ir_value *in[2] = {a, b};
    node(c, op, in, 2, NULL, 0);
    return true;
  }
  case IR_OP_TRANSPOSE: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0);
    ir_attr at = ir_attr_ints("perm", (int64_t[]){2, 0, 1}, 3);
    node(c, op, &x, 1, &at, 1);
    return true;
  }
  case IR_OP_RESHAPE: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0);
    ir_attr at = ir_attr_ints("shape", (int64_t[]){4, 6}, 2);
    node(c, op, &x, 1, &at, 1);
    return true;
  }
  case IR_OP_BROADCAST: {
    if (var > 0) break;
    x = inp(c, TY(dt, 3, 1), K_NORMAL, 0);
    ir_attr at = ir_attr_ints("shape", (int64_t[]){2, 3, 4}, 3);
    node(c, op, &x, 1, &at, 1);
    return true;
  }
  case IR_OP_SLICE: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 7), K_NORMAL, 0);
    ir_attr at[4] = {ir_attr_int("axis", 1), ir_attr_int("start", 1), ir_attr_int("end", 6), ir_attr_int("step", 2)};
    node(c, op, &x, 1, at, 4);
    return true;
  }
  case IR_OP_UNSLICE: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    ir_attr at[5] = {ir_attr_int("axis", 1), ir_attr_int("start", 1), ir_attr_int("end", 6), ir_attr_int("step", 2),
                     ir_attr_int("size", 7)};
    node(c, op, &x, 1, at, 5);
    return true;
  }
  case IR_OP_CONCAT: {
    if (var > 0) break;
    ir_value *in[3] = {inp(c, TY(dt, 2, 3), K_NORMAL, 0), inp(c, TY(dt, 2, 1), K_NORMAL, 0),
                       inp(c, TY(dt, 2, 2), K_NORMAL, 0)};
    ir_attr at = ir_attr_int("axis", 1);
    node(c, op, in, 3, &at, 1);
    return true;
  }
  case IR_OP_SPLIT: {
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 5), K_NORMAL, 0);
    ir_attr at[2] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", (int64_t[]){1, 3, 1}, 3)};
    node(c, op, &x, 1, at, 2);
    c->skip_out[1] = true; /* an unused result: its cotangent is zero */
    return true;
  }
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_MAX: {
    if (var > 1) break;
    x = inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0);
    ir_attr at[2] = {var ? ir_attr_ints("axes", (int64_t[]){0, 2}, 2) : ir_attr_ints("axes", (int64_t[]){1}, 1),
                     ir_attr_int("keepdims", var)};
    node(c, op, &x, 1, at, 2);
    return true;
  }
  case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX: {
    if (var > 1) break;
    x = inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0);
    ir_attr at = ir_attr_int("axis", var ? 2 : 1);
    node(c, op, &x, 1, &at, 1);
    return true;
  }
  case IR_OP_LAYERNORM: case IR_OP_RMSNORM: {
    if (var > 0) break;
    ir_value *in[3] = {inp(c, TY(dt, 2, 3, 5), K_NORMAL, 0), inp(c, TY(dt, 5), K_NORMAL, 0),
                       inp(c, TY(dt, 5), K_NORMAL, 0)};
    ir_attr at = ir_attr_float("eps", 1e-5);
    node(c, op, in, op == IR_OP_LAYERNORM ? 3 : 2, &at, 1);
    return true;
  }
  case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD: {
    /* differentiated through its primitives (a second derivative through a
     * norm): rows of a rank-3 x; a rank-1 x (dbeta is dy itself); x given
     * as dy too (one operand, its gradient counted once) */
    if (var > 2) break;
    x = inp(c, var == 1 ? TY(dt, 5) : TY(dt, 2, 3, 5), K_NORMAL, 0);
    ir_value *gm = inp(c, TY(dt, 5), K_NORMAL, 0);
    ir_value *in[3] = {x, gm, var == 2 ? x : inp(c, x->type, K_NORMAL, 0)};
    ir_attr at = ir_attr_float("eps", 1e-5);
    node(c, op, in, 3, &at, 1);
    return true;
  }
  case IR_OP_EMBEDDING: {
    if (var > 0) break;
    ir_value *in[2] = {inp(c, TY(dt, 6, 3), K_NORMAL, 0), inp(c, TY(IR_DT_I32, 2, 4), K_INT, 6)};
    node(c, op, in, 2, NULL, 0);
    return true;
  }
  case IR_OP_EMBEDDING_GRAD: {
    if (var > 0) break;
    ir_value *in[2] = {inp(c, TY(IR_DT_I64, 2, 4), K_INT, 6), inp(c, TY(dt, 2, 4, 3), K_NORMAL, 0)};
    ir_attr at = ir_attr_int("vocab", 6);
    node(c, op, in, 2, &at, 1);
    return true;
  }
  case IR_OP_CROSS_ENTROPY: {
    if (var > 0) break;
    ir_value *in[2] = {inp(c, TY(dt, 2, 3, 5), K_NORMAL, 0), inp(c, TY(IR_DT_I64, 2, 3), K_INT, 5)};
    node(c, op, in, 2, NULL, 0);
    return true;
  }
  case IR_OP_CROSS_ENTROPY_GRAD: {
    if (var > 0) break;
    ir_value *in[3] = {inp(c, TY(dt, 2, 3, 5), K_NORMAL, 0), inp(c, TY(IR_DT_I32, 2, 3), K_INT, 5),
                       inp(c, SCALAR(dt), K_NORMAL, 0)};
    node(c, op, in, 3, NULL, 0);
    return true;
  }
  case IR_OP_CAUSAL_MASK: {
    if (var > 1) break;
    /* the masked entries are -inf: variant 0 follows with softmax (as attention
     * does), variant 1 uses fill = 0 */
    x = inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0);
    if (var == 0) {
      ir_value *m = node1(c, op, &x, 1, NULL, 0);
      ir_attr at = ir_attr_int("axis", 2);
      node(c, IR_OP_SOFTMAX, &m, 1, &at, 1);
    } else {
      ir_attr at = ir_attr_float("fill", 0.0);
      node(c, op, &x, 1, &at, 1);
    }
    return true;
  }
  case IR_OP_DROPOUT: {
    /* the training form with the mask fixed (the key and the positions are
     * inputs that finite differences leave alone): half the elements dropped */
    if (var > 0) break;
    static const int64_t strides[3] = {12, 4, 1};
    ir_value *in[5] = {inp(c, TY(dt, 2, 3, 4), K_NORMAL, 0), inp(c, SCALAR(IR_DT_I64), K_INT, 1000),
                       inp(c, TY(IR_DT_I64, 2, 1, 1), K_INT, 2), inp(c, TY(IR_DT_I64, 1, 3, 1), K_INT, 3),
                       inp(c, TY(IR_DT_I64, 1, 1, 4), K_INT, 4)};
    ir_attr at[3] = {ir_attr_float("p", 0.5), ir_attr_int("stream", 1), ir_attr_ints("strides", strides, 3)};
    node(c, op, in, 5, at, 3);
    return true;
  }
  case IR_OP_EINSUM: {
    if (var >= (int)(sizeof einsum_eqs / sizeof einsum_eqs[0])) break;
    ir_value *in[2];
    int n = einsum_ranks[var][1] ? 2 : 1;
    for (int i = 0; i < n; i++) in[i] = inp(c, T(dt, einsum_ranks[var][i], einsum_dims[var][i]), K_NORMAL, 0);
    ir_attr at = ir_attr_str("eq", einsum_eqs[var]);
    node(c, op, in, n, &at, 1);
    return true;
  }
  case IR_OP_ATTENTION: {
    if (var > 1) break;
    /* variant 0: only o is used (the fused backward); variant 1: causal, and
     * lse is used too (its gradient is built in primitives) */
    ir_value *in[3] = {inp(c, TY(dt, 1, 2, 3, 4), K_NORMAL, 0), inp(c, TY(dt, 1, 2, 3, 4), K_NORMAL, 0),
                       inp(c, TY(dt, 1, 2, 3, 2), K_NORMAL, 0)};
    ir_attr at[2] = {ir_attr_float("scale", 0.5), ir_attr_int("causal", var)};
    node(c, op, in, 3, at, 2);
    c->skip_out[1] = var == 0;
    return true;
  }
  case IR_OP_ALL_REDUCE: case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_TO_ALL:
  case IR_OP_COMM_BROADCAST: case IR_OP_MESH_SLICE: {
    /* one-rank groups (n = 1): the rules' plumbing, run by the executor's
     * local path; across ranks they are checked under mpirun (test_shard) */
    if (var > 0) break;
    ir_value *x = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    ir_attr at[4] = {ir_attr_mesh_axis("axis", IR_AXIS_TP), ir_attr_int("n", 1)};
    int na = 2;
    if (op == IR_OP_ALL_GATHER || op == IR_OP_REDUCE_SCATTER || op == IR_OP_MESH_SLICE) at[na++] = ir_attr_int("dim", 1);
    if (op == IR_OP_ALL_TO_ALL) {
      at[na++] = ir_attr_int("split_dim", 1);
      at[na++] = ir_attr_int("concat_dim", 0);
    }
    if (op == IR_OP_COMM_BROADCAST) at[na++] = ir_attr_int("root", 0);
    node(c, op, &x, 1, at, na);
    return true;
  }
  case IR_OP_SHARD_HINT: { /* identity on one device; the gradient takes the same constraint */
    if (var > 0) break;
    x = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    ir_attr at = ir_attr_str("spec", "-, tp");
    ir_value *sq = node1(c, IR_OP_SQUARE, &x, 1, NULL, 0);
    node(c, op, &sq, 1, &at, 1);
    return true;
  }
  case IR_OP_SEND: case IR_OP_RECV: {
    /* to oneself on a one-rank axis: y = recv() after send(x) */
    if (var > 0) break;
    ir_value *x = inp(c, TY(dt, 2, 3), K_NORMAL, 0);
    ir_attr at[3] = {ir_attr_mesh_axis("axis", IR_AXIS_PP), ir_attr_int("n", 1), ir_attr_int("peer", 0)};
    char err[256];
    ir_value *sq = node1(c, IR_OP_SQUARE, &x, 1, NULL, 0);
    if (!ir_graph_build(c->g, IR_OP_SEND, &sq, 1, at, 3, NULL, NULL, L(2), err, sizeof err)) abort();
    ir_type t = x->type;
    ir_node *r = ir_graph_build(c->g, IR_OP_RECV, NULL, 0, at, 3, &t, "y", L(3), err, sizeof err);
    if (!r) abort();
    c->out[c->n_out++] = r->out[0];
    return true;
  }
  case IR_OP_CONST: case IR_OP_IOTA: case IR_OP_NOT: case IR_OP_EQ: case IR_OP_NE: case IR_OP_LT: case IR_OP_LE:
  case IR_OP_GT: case IR_OP_GE: case IR_OP_AND: case IR_OP_OR: case IR_OP_GRAD: case IR_OP_ARGMAX:
  case IR_OP_COUNT_NONFINITE: case IR_OP_SUM_SQUARES:
  case IR_OP_ATTENTION_GRAD: case IR_OP_FUSED: case IR_OP_FUSED_MATMUL: case IR_OP_ADD_LAYERNORM:
    break; /* not differentiable (fused ops are made after autodiff) */
  default:
    if (ir_op_kind_of(op) == IR_OPK_BINARY && (ir_op_flags(op) & (IR_OPF_FLOAT | IR_OPF_NUMERIC))) {
      /* an arithmetic binary op: variant 0 broadcasts both ways, variant 1
       * has equal shapes (positive bases for pow, divisors away from 0) */
      if (var > 1) break;
      a = inp(c, var ? TY(dt, 2, 3) : TY(dt, 2, 1, 3), op == IR_OP_POW ? K_POSITIVE : K_NORMAL, 0);
      b = inp(c, var ? TY(dt, 2, 3) : TY(dt, 4, 3), op == IR_OP_DIV ? K_AWAY : K_NORMAL, 0);
      ir_value *in[2] = {a, b};
      node(c, op, in, 2, NULL, 0);
      return true;
    }
    /* an arithmetic unary op, by its kind and operand facts: no case of its
     * own; inputs stay inside its domain (positive for log and the roots)
     * and away from its kinks (0 for abs, relu and sign) */
    if (ir_op_kind_of(op) != IR_OPK_UNARY || !(ir_op_flags(op) & (IR_OPF_FLOAT | IR_OPF_NUMERIC)) || var > 0) break;
    x = inp(c, TY(dt, 2, 3), (op == IR_OP_LOG || op == IR_OP_SQRT || op == IR_OP_RSQRT) ? K_POSITIVE
                             : (op == IR_OP_ABS || op == IR_OP_RELU || op == IR_OP_SIGN) ? K_AWAY : K_NORMAL, 0);
    node(c, op, &x, 1, NULL, 0);
    return true;
  }
  ir_graph_free(c->g);
  c->g = NULL;
  return false;
}

/* The derivative graph of a case: outputs loss, jvp, d_x* (one per wrt). */
typedef struct {
  tcase c;
  ir_value *wrt[8], *tan[8];
  int n_wrt;
  rt_tensor **in;  /* per graph input */
  int n_in;
} dcase;

static bool build_derivs(ir_op op, int var, ir_dtype dt, dcase *dc) {
  memset(dc, 0, sizeof *dc);
  tcase *c = &dc->c;
  if (!build_case(op, var, dt, c)) return false;
  ir_value *loss = NULL;
  for (int j = 0; j < c->n_out; j++) {
    if (c->skip_out[j] || !ir_dtype_is_float(c->out[j]->type.dtype)) continue;
    ir_value *w = ir_graph_add_input(c->g, "w", c->out[j]->type, L(3));
    ir_value *m[2] = {c->out[j], w};
    ir_value *p = ir_graph_build1(c->g, IR_OP_MUL, m, 2, NULL, 0, NULL, L(3));
    int64_t axes[IR_MAX_RANK];
    for (int i = 0; i < p->type.rank; i++) axes[i] = i;
    ir_attr at[2] = {ir_attr_ints("axes", axes, p->type.rank), ir_attr_int("keepdims", 0)};
    ir_value *s = ir_graph_build1(c->g, IR_OP_REDUCE_SUM, &p, 1, at, 2, NULL, L(3));
    if (loss) {
      ir_value *in[2] = {loss, s};
      loss = ir_graph_build1(c->g, IR_OP_ADD, in, 2, NULL, 0, NULL, L(3));
    } else {
      loss = s;
    }
  }
  for (int i = 0; i < c->n_in; i++)
    if (ir_dtype_is_float(c->in[i]->type.dtype)) dc->wrt[dc->n_wrt++] = c->in[i];
  ir_graph_add_output(c->g, "loss", loss);
  ir_value *grads[8], *jl = NULL;
  ir_diag *d = ir_diag_new(stderr);
  CHECK_EQ_INT(pass_vjp(c->g, loss, dc->wrt, dc->n_wrt, grads, d), 0);
  for (int k = 0; k < dc->n_wrt; k++)
    dc->tan[k] = ir_graph_add_input(c->g, "t", dc->wrt[k]->type, L(4));
  CHECK_EQ_INT(pass_jvp(c->g, dc->wrt, dc->tan, dc->n_wrt, &loss, 1, &jl, d), 0);
  ir_graph_add_output(c->g, "jvp", jl);
  for (int k = 0; k < dc->n_wrt; k++) ir_graph_add_output(c->g, dc->wrt[k]->name, grads[k]);
  int problems = ir_verify(c->g, d);
  if (problems) ir_print(stderr, c->g);
  CHECK_EQ_INT(problems, 0);
  ir_diag_free(d);
  /* tensors: case inputs by kind, weights normal, tangents zero */
  dc->n_in = c->g->n_inputs;
  dc->in = calloc((size_t)dc->n_in, sizeof *dc->in);
  uint64_t seed = rt_hash_name(ir_op_name(op)) + (uint64_t)var;
  for (int i = 0; i < dc->n_in; i++) {
    ir_value *v = c->g->inputs[i];
    dc->in[i] = rt_tensor_new(&v->type);
    int kind = K_NORMAL;
    int64_t high = 10;
    for (int j = 0; j < c->n_in; j++)
      if (c->in[j] == v) kind = c->kind[j], high = c->high[j];
    bool tangent = false;
    for (int k = 0; k < dc->n_wrt; k++) tangent |= dc->tan[k] == v;
    if (tangent) continue;
    rt_fill_random(dc->in[i], seed, v->name, high);
    int64_t n = ir_type_numel(&v->type);
    for (int64_t e = 0; kind != K_INT && e < n; e++) {
      double x = rt_tensor_get(dc->in[i], e);
      if (kind == K_POSITIVE) x = fabs(x) + 0.5;
      if (kind == K_AWAY) x = x < 0 ? x - 0.3 : x + 0.3; /* no kinks within reach of the step */
      rt_tensor_set(dc->in[i], e, x);
    }
  }
  return true;
}

static void free_dcase(dcase *dc) {
  for (int i = 0; i < dc->n_in; i++) rt_tensor_free(dc->in[i]);
  free(dc->in);
  ir_graph_free(dc->c.g);
}

static rt_tensor *input_of(dcase *dc, const ir_value *v) {
  for (int i = 0; i < dc->n_in; i++)
    if (dc->c.g->inputs[i] == v) return dc->in[i];
  return NULL;
}

/* Runs g on the cpu and returns the outputs (free_run frees them). */
static rt_tensor **run_graph(ir_graph *g, rt_tensor **in) {
  rt_tensor **out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[512];
  int rc = rt_run(&rt_cpu_backend, g, in, NULL, out, NULL, err, sizeof err);
  if (rc != 0) fprintf(stderr, "run: %s\n", err);
  CHECK_EQ_INT(rc, 0);
  return out;
}

static void free_run(ir_graph *g, rt_tensor **out) {
  for (int i = 0; i < g->n_outputs; i++) rt_tensor_free(out[i]);
  free(out);
}

static rt_tensor **run(dcase *dc) { return run_graph(dc->c.g, dc->in); }

static void free_outs(dcase *dc, rt_tensor **out) { free_run(dc->c.g, out); }

static double fd_tol_worst = 0, dot_tol_worst = 0;
static int cases_f64 = 0, cases_f32 = 0;

static void check_f64(ir_op op, int var) {
  dcase dc;
  if (!build_derivs(op, var, IR_DT_F64, &dc)) return;
  cases_f64++;
  rt_tensor **base = run(&dc);
  double max_abs = 0, max_fd = 0;
  for (int k = 0; k < dc.n_wrt; k++) {
    rt_tensor *x = input_of(&dc, dc.wrt[k]), *t = input_of(&dc, dc.tan[k]);
    int64_t n = ir_type_numel(&x->type);
    for (int64_t e = 0; e < n; e++) {
      double x0 = rt_tensor_get(x, e), h = 1e-6 * fmax(1.0, fabs(x0)), l[2];
      for (int s = 0; s < 2; s++) {
        rt_tensor_set(x, e, x0 + (s ? -h : h));
        rt_tensor **o = run(&dc);
        l[s] = rt_tensor_get(o[0], 0);
        free_outs(&dc, o);
      }
      rt_tensor_set(x, e, x0);
      double fd = (l[0] - l[1]) / (2 * h);
      double rev = rt_tensor_get(base[2 + k], e);
      rt_tensor_set(t, e, 1.0);
      rt_tensor **o = run(&dc);
      double fwd = rt_tensor_get(o[1], 0);
      free_outs(&dc, o);
      rt_tensor_set(t, e, 0.0);
      double err = fmax(fabs(rev - fd), fabs(fwd - fd));
      if (!(err <= max_abs)) max_abs = err; /* NaN sticks */
      max_fd = fmax(max_fd, fabs(fd));
      if (!(err <= 1e-6 * fmax(max_fd, 1e-9)))
        fprintf(stderr, "  %s/%d: d/d%s[%lld]: reverse %.12g forward %.12g finite difference %.12g\n",
                ir_op_name(op), var, dc.wrt[k]->name, (long long)e, rev, fwd, fd);
    }
  }
  double rel = max_abs == 0 ? 0 : max_abs / fmax(max_fd, 1e-300);
  if (!(rel <= 1e-6))
    fprintf(stderr, "%s variant %d (f64): max abs error %g, largest derivative %g, rel %g (tol 1e-6)\n",
            ir_op_name(op), var, max_abs, max_fd, rel);
  CHECK(rel <= 1e-6);
  if (rel > fd_tol_worst) fd_tol_worst = rel;
  free_outs(&dc, base);
  free_dcase(&dc);
}

static void check_f32_dot(ir_op op, int var) {
  dcase dc;
  if (!build_derivs(op, var, IR_DT_F32, &dc)) return;
  cases_f32++;
  uint64_t seed = 99 + (uint64_t)var;
  for (int k = 0; k < dc.n_wrt; k++) rt_fill_random(input_of(&dc, dc.tan[k]), seed, dc.tan[k]->name, 2);
  rt_tensor **o = run(&dc);
  double jt_c = rt_tensor_get(o[1], 0), t_jtc = 0, scale = 0;
  for (int k = 0; k < dc.n_wrt; k++) {
    rt_tensor *t = input_of(&dc, dc.tan[k]);
    for (int64_t e = 0; e < ir_type_numel(&t->type); e++) {
      double p = rt_tensor_get(t, e) * rt_tensor_get(o[2 + k], e);
      t_jtc += p;
      scale += fabs(p);
    }
  }
  double err = fabs(jt_c - t_jtc), rel = err / fmax(scale, 1e-30);
  if (!(rel <= 1e-4))
    fprintf(stderr, "%s variant %d (f32): <t, J^T c> = %.9g, <J t, c> = %.9g, rel %g (tol 1e-4)\n", ir_op_name(op),
            var, t_jtc, jt_c, rel);
  CHECK(rel <= 1e-4 || scale == 0);
  if (rel > dot_tol_worst && scale > 0) dot_tol_worst = rel;
  free_outs(&dc, o);
  free_dcase(&dc);
}

static void test_all_ops(void) {
  for (int op = 0; op < IR_NUM_OPS; op++) {
    const char *why;
    bool diff = pass_vjp_has_rule((ir_op)op, &why);
    tcase c;
    bool has_case = build_case((ir_op)op, 0, IR_DT_F64, &c);
    if (has_case) ir_graph_free(c.g);
    if (diff != has_case) fprintf(stderr, "op %s: differentiable %d but test case %d\n", ir_op_name((ir_op)op), diff, has_case);
    CHECK_EQ_INT(diff, has_case); /* every differentiable op is tested */
    for (int var = 0; var < 16; var++) {
      check_f64((ir_op)op, var);
      check_f32_dot((ir_op)op, var);
    }
  }
  printf("all ops: %d f64 cases (worst rel error vs finite differences %.3g), %d f32 cases (worst rel "
         "<t, J^T c> - <J t, c> %.3g)\n",
         cases_f64, fd_tol_worst, cases_f32, dot_tol_worst);
}

/* ---- the autodiff pass ---- */

/* hw1_q4: v1 = x1 + x2, v2 = x1 - x2, y1 = v1^2, y2 = v2^2 */
static ir_graph *hw1(ir_value **x1, ir_value **x2, ir_value **y1, ir_value **y2) {
  ir_graph *g = ir_graph_new("hw1", "hw1.tg");
  ir_type s = SCALAR(IR_DT_F64);
  *x1 = ir_graph_add_input(g, "x1", s, L(1));
  *x2 = ir_graph_add_input(g, "x2", s, L(1));
  ir_value *in[2] = {*x1, *x2};
  ir_value *v1 = ir_graph_build1(g, IR_OP_ADD, in, 2, NULL, 0, "v1", L(2));
  ir_value *v2 = ir_graph_build1(g, IR_OP_SUB, in, 2, NULL, 0, "v2", L(3));
  *y1 = ir_graph_build1(g, IR_OP_SQUARE, &v1, 1, NULL, 0, "y1", L(4));
  *y2 = ir_graph_build1(g, IR_OP_SQUARE, &v2, 1, NULL, 0, "y2", L(5));
  return g;
}

static double run_scalar_outputs(ir_graph *g, double a, double b, double *outs) {
  ir_type s = SCALAR(IR_DT_F64);
  rt_tensor *in[2] = {rt_tensor_new(&s), rt_tensor_new(&s)};
  rt_tensor_fill(in[0], a);
  rt_tensor_fill(in[1], b);
  rt_tensor **out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[256];
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, NULL, err, sizeof err), 0);
  for (int i = 0; i < g->n_outputs; i++) {
    outs[i] = out[i] ? rt_tensor_get(out[i], 0) : NAN;
    rt_tensor_free(out[i]);
  }
  free(out);
  rt_tensor_free(in[0]);
  rt_tensor_free(in[1]);
  return outs[0];
}

static void test_classic(void) {
  ir_diag *d = ir_diag_new(stderr);
  for (int from = 0; from < 2; from++) { /* reverse from y1, y2 */
    ir_value *x1, *x2, *y1, *y2, *gr[2];
    ir_graph *g = hw1(&x1, &x2, &y1, &y2);
    ir_value *wrt[2] = {x1, x2};
    CHECK_EQ_INT(pass_vjp(g, from ? y2 : y1, wrt, 2, gr, d), 0);
    ir_graph_add_output(g, "d_x1", gr[0]);
    ir_graph_add_output(g, "d_x2", gr[1]);
    double o[2];
    run_scalar_outputs(g, 2, 4, o);
    CHECK_NEAR(o[0], from ? -4 : 12, 1e-15);
    CHECK_NEAR(o[1], from ? 4 : 12, 1e-15);
    ir_graph_free(g);
  }
  for (int dir = 0; dir < 2; dir++) { /* forward with dx1 = 1, dx2 = 1 */
    ir_value *x1, *x2, *y1, *y2, *t[2];
    ir_graph *g = hw1(&x1, &x2, &y1, &y2);
    ir_value *seed = ir_graph_build(g, IR_OP_CONST, NULL, 0, &(ir_attr){.key = "value", .kind = IR_ATTR_FLOAT, .f = 1},
                                    1, &(ir_type){.dtype = IR_DT_F64}, "one", L(6), NULL, 0)->out[0];
    ir_value *wrt = dir ? x2 : x1, *of[2] = {y1, y2};
    CHECK_EQ_INT(pass_jvp(g, &wrt, &seed, 1, of, 2, t, d), 0);
    CHECK_STR(t[0]->name, "t_y1");
    ir_graph_add_output(g, "t_y1", t[0]);
    ir_graph_add_output(g, "t_y2", t[1]);
    double o[2];
    run_scalar_outputs(g, 2, 4, o);
    CHECK_NEAR(o[0], 12, 1e-15);
    CHECK_NEAR(o[1], dir ? 4 : -4, 1e-15);
    ir_graph_free(g);
  }
  ir_diag_free(d);
}

static void test_pass(void) {
  ir_diag *d = ir_diag_new(stderr);
  /* y = x^3 (as x * square(x)) in layer 2; g = grad(y, x, z); h = grad(g, x) */
  ir_graph *g = ir_graph_new("p", "p.tg");
  ir_type s = SCALAR(IR_DT_F64);
  ir_value *x = ir_graph_add_input(g, "x", s, L(1)), *z = ir_graph_add_input(g, "z", s, L(1));
  ir_value *sq = ir_graph_build1(g, IR_OP_SQUARE, &x, 1, NULL, 0, "sq", L(2));
  ir_value *in[2] = {x, sq};
  ir_value *y = ir_graph_build1(g, IR_OP_MUL, in, 2, NULL, 0, "y", L(3));
  y->def->layer = 2;
  ir_value *gin[3] = {y, x, z};
  char err[256];
  ir_node *gn = ir_graph_build(g, IR_OP_GRAD, gin, 3, NULL, 0, NULL, "g", L(4), err, sizeof err);
  CHECK(gn != NULL);
  ir_value *hin[2] = {gn->out[0], x};
  ir_node *hn = ir_graph_build(g, IR_OP_GRAD, hin, 2, NULL, 0, NULL, "h", L(5), err, sizeof err);
  ir_graph_add_output(g, "y", y);
  ir_graph_add_output(g, "dy_dx", gn->out[0]);
  ir_graph_add_output(g, "dy_dz", gn->out[1]);
  ir_graph_add_output(g, "d2y_dx2", hn->out[0]);
  pass_options o = {.diag = d};
  CHECK_EQ_INT(pass_autodiff(g, &o), 0);
  CHECK_EQ_INT(ir_verify(g, d), 0);
  bool any_grad = false, named = false, located = false, layered = false;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    CHECK(n->op != IR_OP_GRAD);
    if (n->out[0]->role != IR_ROLE_GRAD) continue;
    any_grad = true;
    named |= strcmp(n->out[0]->name, "d_sq") == 0;
    located |= n->loc.line == 3 && n->op == IR_OP_MUL;
    layered |= n->layer == 2;
  }
  CHECK(any_grad && named && located && layered);
  CHECK(g->outputs[2].value->def && g->outputs[2].value->def->op == IR_OP_CONST); /* y does not depend on z */
  double outs[4];
  run_scalar_outputs(g, 1.5, 0.25, outs);
  CHECK_NEAR(outs[0], 3.375, 1e-15);
  CHECK_NEAR(outs[1], 3 * 1.5 * 1.5, 1e-15);
  CHECK_NEAR(outs[2], 0, 0);
  CHECK_NEAR(outs[3], 6 * 1.5, 1e-15);
  ir_graph_free(g);

  /* pass_vjp through an unexpanded grad node: a clear error at its line */
  g = ir_graph_new("e", "e.tg");
  x = ir_graph_add_input(g, "x", s, L(1));
  ir_value *sq2 = ir_graph_build1(g, IR_OP_SQUARE, &x, 1, NULL, 0, "sq", L(2));
  ir_value *gi[2] = {sq2, x};
  gn = ir_graph_build(g, IR_OP_GRAD, gi, 2, NULL, 0, NULL, "g", (ir_loc){"e.tg", 3, 1}, err, sizeof err);
  FILE *f = tmpfile();
  ir_diag *d2 = ir_diag_new(f);
  ir_value *gr;
  CHECK_EQ_INT(pass_vjp(g, gn->out[0], &x, 1, &gr, d2), -1);
  fflush(f);
  rewind(f);
  char msg[512] = "";
  size_t got = fread(msg, 1, sizeof msg - 1, f);
  msg[got] = 0;
  if (!strstr(msg, "e.tg:3:1: error: cannot differentiate")) fprintf(stderr, "got: %s\n", msg);
  CHECK(strstr(msg, "e.tg:3:1: error: cannot differentiate") != NULL);
  CHECK(strstr(msg, "'grad' is a gradient request") != NULL);
  /* a non-scalar loss is refused */
  ir_type v3 = TY(IR_DT_F64, 3);
  ir_value *vec = ir_graph_add_input(g, "v", v3, (ir_loc){"e.tg", 4, 1});
  CHECK_EQ_INT(pass_vjp(g, vec, &vec, 1, &gr, d2), -1);
  fclose(f);
  ir_diag_free(d2);
  ir_graph_free(g);
  ir_diag_free(d);
}

/* ---- a second derivative through the norms' fused backward ----
 * y = layernorm(x, g, b), z = rmsnorm(y, h), l = sum(z z w);
 * dx, dg, dh = grad(l, [x, g, h]); s = sum(dx v) + sum(dg u) + sum(dh u);
 * dsx, dsg = grad(s, [x, g]); then forward mode over it: jvp = the
 * derivative of s along the tangents tx, tg of x, g. The first grad makes
 * layernorm_grad and rmsnorm_grad; with `expand` they are written in
 * primitives (ad_norm_grad_prims, the autodiff's backward before the fused
 * ops) before the second grad and the jvp, which then never meet them.
 * Outputs: dx, dg, dh, s, dsx, dsg, jvp. */
static ir_graph *norm_second_order(bool expand, int *fused) {
  ir_diag *d = ir_diag_new(stderr);
  pass_options o = {.diag = d};
  ir_graph *g = ir_graph_new("so", "so.tg");
  ir_type xt = TY(IR_DT_F64, 2, 3, 5), vt = TY(IR_DT_F64, 5);
  const char *names[9] = {"x", "g", "b", "h", "w", "v", "u", "tx", "tg"};
  ir_value *in[9];
  for (int i = 0; i < 7; i++) in[i] = ir_graph_add_input(g, names[i], i == 0 || i == 4 || i == 5 ? xt : vt, L(1));
  ir_attr eps[2] = {ir_attr_float("eps", 1e-5), ir_attr_float("eps", 1e-6)};
  ir_value *y = ir_graph_build1(g, IR_OP_LAYERNORM, in, 3, eps, 1, "y", L(2));
  ir_value *yh[2] = {y, in[3]};
  ir_value *z = ir_graph_build1(g, IR_OP_RMSNORM, yh, 2, eps + 1, 1, "z", L(3));
  ir_value *zz[2] = {z, z};
  ir_value *zzw[2] = {ir_graph_build1(g, IR_OP_MUL, zz, 2, NULL, 0, NULL, L(4)), in[4]};
  ir_value *l = pass_sum_all(g, ir_graph_build1(g, IR_OP_MUL, zzw, 2, NULL, 0, NULL, L(4)), "l");
  ir_value *gin[4] = {l, in[0], in[1], in[3]};
  char err[256];
  ir_node *gn = ir_graph_build(g, IR_OP_GRAD, gin, 4, NULL, 0, NULL, "d", L(5), err, sizeof err);
  CHECK(gn != NULL);
  const char *first[3] = {"dx", "dg", "dh"};
  for (int j = 0; j < 3; j++) ir_graph_add_output(g, first[j], gn->out[j]);
  CHECK_EQ_INT(pass_autodiff(g, &o), 0);
  *fused = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    ir_node *nd = g->nodes[k];
    if (nd->dead || (nd->op != IR_OP_LAYERNORM_GRAD && nd->op != IR_OP_RMSNORM_GRAD)) continue;
    ++*fused;
    if (!expand) continue;
    int before = g->n_nodes;
    ir_value *e[3];
    ad_ctx c = {.g = g, .fwd = nd};
    ad_norm_grad_prims(&c, nd, e);
    int added = g->n_nodes - before;
    ir_graph_move_tail(g, added, k);
    ir_replace_uses_many(g, nd->out, e, nd->n_out);
    nd->dead = true;
    k += added;
  }
  ir_value *s = NULL;
  for (int j = 0; j < 3; j++) {
    ir_value *m[2] = {g->outputs[j].value, in[j == 0 ? 5 : 6]};
    ir_value *t = pass_sum_all(g, ir_graph_build1(g, IR_OP_MUL, m, 2, NULL, 0, NULL, L(6)), NULL);
    ir_value *a[2] = {s, t};
    s = s ? ir_graph_build1(g, IR_OP_ADD, a, 2, NULL, 0, "s", L(6)) : t;
  }
  ir_graph_add_output(g, "s", s);
  ir_value *sin[3] = {s, in[0], in[1]};
  gn = ir_graph_build(g, IR_OP_GRAD, sin, 3, NULL, 0, NULL, "ds", L(7), err, sizeof err);
  CHECK(gn != NULL);
  ir_graph_add_output(g, "dsx", gn->out[0]);
  ir_graph_add_output(g, "dsg", gn->out[1]);
  CHECK_EQ_INT(pass_autodiff(g, &o), 0);
  in[7] = ir_graph_add_input(g, names[7], xt, L(8));
  in[8] = ir_graph_add_input(g, names[8], vt, L(8));
  ir_value *jv;
  CHECK_EQ_INT(pass_jvp(g, in, in + 7, 2, &g->outputs[3].value, 1, &jv, d), 0);
  ir_graph_add_output(g, "jvp", jv);
  CHECK_EQ_INT(ir_verify(g, d), 0);
  ir_diag_free(d);
  return g;
}

/* max |a - b| over max |b| (0 when both are 0) */
static double rel_diff(const rt_tensor *a, const rt_tensor *b) {
  double err = 0, big = 0;
  for (int64_t e = 0; e < ir_type_numel(&b->type); e++) {
    double x = rt_tensor_get(a, e), y = rt_tensor_get(b, e);
    if (!(fabs(x - y) <= err)) err = fabs(x - y); /* NaN sticks */
    big = fmax(big, fabs(y));
  }
  return err == 0 ? 0 : err / fmax(big, 1e-300);
}

/* s (output 3) of g at at + h dir for x and g (in[0], in[1]) */
static double s_moved(ir_graph *g, rt_tensor **in, rt_tensor *const *at, rt_tensor *const *dir, double h) {
  for (int i = 0; i < 2; i++)
    for (int64_t q = 0; q < ir_type_numel(&in[i]->type); q++)
      rt_tensor_set(in[i], q, rt_tensor_get(at[i], q) + h * rt_tensor_get(dir[i], q));
  rt_tensor **p = run_graph(g, in);
  double s = rt_tensor_get(p[3], 0);
  free_run(g, p);
  return s;
}

/* Tolerances: dsx, dsg (reverse over reverse) and jvp (forward over
 * reverse) within 1e-6 of central differences of s (h = 1e-6 max(1, |x|),
 * norm-wise as test_all_ops); every output within 1e-12 of the graph whose
 * fused backward was written in primitives first (the same primitives and
 * rules: only the order of a few sums differs). */
static void test_norm_second_order(void) {
  int fused[2];
  ir_graph *g = norm_second_order(false, &fused[0]), *ref = norm_second_order(true, &fused[1]);
  CHECK_EQ_INT(fused[0], 2); /* layernorm_grad and rmsnorm_grad, differentiated by their rules */
  CHECK_EQ_INT(fused[1], 2);
  int n_in = g->n_inputs;
  rt_tensor **in = calloc((size_t)n_in, sizeof *in);
  for (int i = 0; i < n_in; i++) {
    in[i] = rt_tensor_new(&g->inputs[i]->type);
    rt_fill_random(in[i], 7, g->inputs[i]->name, 0);
  }
  rt_tensor **o = run_graph(g, in), **r = run_graph(ref, in);
  double worst_ref = 0;
  for (int j = 0; j < g->n_outputs; j++) {
    double rel = rel_diff(o[j], r[j]);
    if (!(rel <= 1e-12)) fprintf(stderr, "norm second order: output %s differs from the expansion's by rel %g\n",
                                 g->outputs[j].name, rel);
    CHECK(rel <= 1e-12);
    worst_ref = fmax(worst_ref, rel);
  }
  /* central differences of s (output 3): along each element of x and g,
   * then along the tangents (tx, tg); dir holds the direction */
  rt_tensor *at[2], *dir[2];
  for (int i = 0; i < 2; i++) {
    at[i] = rt_tensor_new(&in[i]->type);
    dir[i] = rt_tensor_new(&in[i]->type);
    for (int64_t q = 0; q < ir_type_numel(&in[i]->type); q++) rt_tensor_set(at[i], q, rt_tensor_get(in[i], q));
  }
  double err = 0, big = 0;
  for (int k = 0; k < 2; k++)
    for (int64_t e = 0; e < ir_type_numel(&in[k]->type); e++) {
      double h = 1e-6 * fmax(1.0, fabs(rt_tensor_get(at[k], e)));
      rt_tensor_set(dir[k], e, 1.0);
      double fd = (s_moved(g, in, at, dir, h) - s_moved(g, in, at, dir, -h)) / (2 * h);
      rt_tensor_set(dir[k], e, 0.0);
      double rev = rt_tensor_get(o[4 + k], e);
      if (!(fabs(rev - fd) <= err)) err = fabs(rev - fd);
      big = fmax(big, fabs(fd));
    }
  double rel_rev = err / fmax(big, 1e-300);
  for (int i = 0; i < 2; i++)
    for (int64_t q = 0; q < ir_type_numel(&in[i]->type); q++) rt_tensor_set(dir[i], q, rt_tensor_get(in[7 + i], q));
  double fd = (s_moved(g, in, at, dir, 1e-6) - s_moved(g, in, at, dir, -1e-6)) / 2e-6, fwd = rt_tensor_get(o[6], 0);
  double rel_fwd = fabs(fwd - fd) / fmax(fabs(fd), 1e-300);
  if (!(rel_rev <= 1e-6 && rel_fwd <= 1e-6))
    fprintf(stderr, "norm second order: reverse rel %g, forward %.12g vs finite difference %.12g (rel %g), tol 1e-6\n",
            rel_rev, fwd, fd, rel_fwd);
  CHECK(rel_rev <= 1e-6);
  CHECK(rel_fwd <= 1e-6);
  printf("norm second order: vs finite differences rel %.3g (reverse over reverse), %.3g (forward over reverse); "
         "vs the expansion's graph rel %.3g\n",
         rel_rev, rel_fwd, worst_ref);
  for (int i = 0; i < 2; i++) {
    rt_tensor_free(at[i]);
    rt_tensor_free(dir[i]);
  }
  free_run(g, o);
  free_run(ref, r);
  for (int i = 0; i < n_in; i++) rt_tensor_free(in[i]);
  free(in);
  ir_graph_free(g);
  ir_graph_free(ref);
}

int main(void) {
  test_rule_tables();
  test_classic();
  test_pass();
  test_norm_second_order();
  test_all_ops();
  return check_done();
}
