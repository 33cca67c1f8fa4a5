/* tests/unit/test_canonicalize.c — the canonicalize pass, rule by rule.
 *
 * Each test builds a small graph with ir_graph_build, runs pass_canonicalize,
 * checks the rule fired (or, for the unsafe rewrites, that it did not) and
 * that ir_verify accepts the result. Folding is checked bit for bit (no
 * tolerance; two NaNs count as equal) against the formula
 * round(dtype, ir_eval(round(operands))) and against the CPU runtime
 * executing the unfolded graph, in f32 and bf16.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pass.h"
#include "runtime.h"

static ir_diag *diag;

static ir_loc L(int line) { return (ir_loc){NULL, line, 1}; }

static ir_type ty(ir_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
  ir_type t = {.dtype = dt, .rank = rank};
  int64_t d[3] = {d0, d1, d2};
  for (int i = 0; i < rank && i < 3; i++) t.dims[i] = d[i];
  return t;
}
static ir_type scalar(ir_dtype dt) { return ty(dt, 0, 0, 0, 0); }

static ir_value *cst(ir_graph *g, ir_type t, double v) {
  ir_attr a = ir_attr_float("value", v);
  char err[256];
  ir_node *n = ir_graph_build(g, IR_OP_CONST, NULL, 0, &a, 1, &t, "c", L(1), err, sizeof err);
  if (!n) {
    fprintf(stderr, "building const: %s\n", err);
    abort();
  }
  return n->out[0];
}

static ir_value *op1(ir_graph *g, ir_op op, ir_value *x, const char *name) {
  return ir_graph_build1(g, op, &x, 1, NULL, 0, name, L(2));
}
static ir_value *op1a(ir_graph *g, ir_op op, ir_value *x, ir_attr a, const char *name) {
  return ir_graph_build1(g, op, &x, 1, &a, 1, name, L(2));
}
static ir_value *op2(ir_graph *g, ir_op op, ir_value *a, ir_value *b, const char *name) {
  ir_value *in[2] = {a, b};
  return ir_graph_build1(g, op, in, 2, NULL, 0, name, L(3));
}
static ir_value *op3(ir_graph *g, ir_op op, ir_value *a, ir_value *b, ir_value *c, const char *name) {
  ir_value *in[3] = {a, b, c};
  return ir_graph_build1(g, op, in, 3, NULL, 0, name, L(4));
}

static void run_canon(ir_graph *g) {
  pass_options o = {.diag = diag};
  CHECK_EQ_INT(pass_canonicalize(g, &o), 0);
  CHECK_EQ_INT(ir_verify(g, diag), 0);
}

static int count_op(const ir_graph *g, ir_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == op;
  return n;
}

static ir_value *out(const ir_graph *g, int i) { return g->outputs[i].value; }

/* The value of output i if it is a CONST, else NAN with *ok = false. */
static double out_const(const ir_graph *g, int i, bool *ok) {
  const ir_node *d = out(g, i)->def;
  *ok = d && d->op == IR_OP_CONST;
  return *ok ? ir_node_attr_float(d, "value", NAN) : NAN;
}

static bool same_bits(double a, double b) {
  if (isnan(a) && isnan(b)) return true;
  return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- constant folding ---- */

static void test_fold_scalar_chain(void) {
  ir_graph *g = ir_graph_new("f", NULL);
  ir_value *x = ir_graph_add_input(g, "x", ty(IR_DT_F32, 2, 2, 3, 0), L(1));
  ir_value *s = op2(g, IR_OP_ADD, cst(g, scalar(IR_DT_F32), 2), cst(g, scalar(IR_DT_F32), 3), "s");
  s->def->layer = 3;
  s->def->loc = L(42);
  ir_value *s2 = op1(g, IR_OP_SQUARE, s, "s2");
  ir_value *y = op2(g, IR_OP_MUL, x, s2, "y");
  ir_graph_add_output(g, "y", y);
  run_canon(g);
  CHECK_EQ_INT(g->n_nodes, 2);
  CHECK(out(g, 0) == y);
  CHECK_STR(g->outputs[0].name, "y");
  CHECK_STR(y->name, "y");
  CHECK(y->def->op == IR_OP_MUL && y->def->in[0] == x);
  const ir_node *c = y->def->in[1]->def;
  CHECK(c && c->op == IR_OP_CONST);
  if (c && c->op == IR_OP_CONST) {
    CHECK(ir_node_attr_float(c, "value", 0) == 25.0);
    CHECK_STR(c->out[0]->name, "s2"); /* folded in place: the result keeps its name */
  }
  /* a folded node keeps its location and layer */
  ir_graph_free(g);

  g = ir_graph_new("f", NULL);
  s = op2(g, IR_OP_SUB, cst(g, scalar(IR_DT_F32), 2), cst(g, scalar(IR_DT_F32), 3), "s");
  s->def->layer = 3;
  s->def->loc = L(42);
  ir_graph_add_output(g, "s", s);
  run_canon(g);
  CHECK_EQ_INT(g->n_nodes, 1);
  CHECK(out(g, 0) == s && s->def->op == IR_OP_CONST);
  CHECK_EQ_INT(s->def->layer, 3);
  CHECK_EQ_INT(s->def->loc.line, 42);
  CHECK(ir_node_attr_float(s->def, "value", 0) == -1.0);
  ir_graph_free(g);
}

static void test_fold_broadcast_compare_where_cast(void) {
  ir_graph *g = ir_graph_new("f", NULL);
  /* f32[3] * f32[2, 1] -> f32[2, 3]: still a splat */
  ir_value *m = op2(g, IR_OP_MUL, cst(g, ty(IR_DT_F32, 1, 3, 0, 0), 1.5), cst(g, ty(IR_DT_F32, 2, 2, 1, 0), 2),
                    "m");
  ir_graph_add_output(g, "m", m);
  ir_value *lt = op2(g, IR_OP_LT, cst(g, scalar(IR_DT_F32), 1), cst(g, scalar(IR_DT_F32), 2), "lt");
  ir_graph_add_output(g, "lt", lt);
  ir_value *eq = op2(g, IR_OP_EQ, cst(g, scalar(IR_DT_F32), 1), cst(g, scalar(IR_DT_F32), 2), "eq");
  ir_graph_add_output(g, "eq", eq);
  ir_value *w = op3(g, IR_OP_WHERE, cst(g, scalar(IR_DT_BOOL), 1), cst(g, ty(IR_DT_F32, 1, 2, 0, 0), 4),
                    cst(g, scalar(IR_DT_F32), 5), "w");
  ir_graph_add_output(g, "w", w);
  ir_value *c32 = op1a(g, IR_OP_CAST, cst(g, scalar(IR_DT_F64), 0.1), ir_attr_dtype("to", IR_DT_F32), "c32");
  ir_graph_add_output(g, "c32", c32);
  ir_value *cbf = op1a(g, IR_OP_CAST, cst(g, scalar(IR_DT_F64), 0.1), ir_attr_dtype("to", IR_DT_BF16), "cbf");
  ir_graph_add_output(g, "cbf", cbf);
  ir_value *ci = op1a(g, IR_OP_CAST, cst(g, scalar(IR_DT_F32), -2.7), ir_attr_dtype("to", IR_DT_I32), "ci");
  ir_graph_add_output(g, "ci", ci);
  int64_t shape23[2] = {2, 3}, shape32[2] = {3, 2}, perm10[2] = {1, 0};
  ir_value *b = op1a(g, IR_OP_BROADCAST, cst(g, scalar(IR_DT_F32), 7), ir_attr_ints("shape", shape23, 2), "b");
  ir_graph_add_output(g, "b", b);
  ir_value *r = op1a(g, IR_OP_RESHAPE, cst(g, ty(IR_DT_F32, 2, 2, 3, 0), 8), ir_attr_ints("shape", shape32, 2),
                     "r");
  ir_graph_add_output(g, "r", r);
  ir_value *t = op1a(g, IR_OP_TRANSPOSE, cst(g, ty(IR_DT_F32, 2, 2, 3, 0), 9), ir_attr_ints("perm", perm10, 2),
                     "t");
  ir_graph_add_output(g, "t", t);
  run_canon(g);

  bool ok;
  CHECK(out_const(g, 0, &ok) == 3.0 && ok);
  ir_type want = ty(IR_DT_F32, 2, 2, 3, 0);
  CHECK(ir_type_equal(&out(g, 0)->type, &want));
  CHECK(out_const(g, 1, &ok) == 1.0 && ok);
  CHECK(out(g, 1)->type.dtype == IR_DT_BOOL);
  CHECK(out_const(g, 2, &ok) == 0.0 && ok);
  CHECK(out_const(g, 3, &ok) == 4.0 && ok);
  CHECK(out(g, 3)->type.rank == 1 && out(g, 3)->type.dims[0] == 2);
  CHECK(out_const(g, 4, &ok) == (double)(float)0.1 && ok);
  double bf = out_const(g, 5, &ok);
  CHECK(ok && bf == (double)ir_bf16_to_f32(ir_f32_to_bf16(0.1f)) && bf != (double)(float)0.1);
  CHECK(out_const(g, 6, &ok) == -2.0 && ok);
  CHECK(out(g, 6)->type.dtype == IR_DT_I32);
  CHECK(out_const(g, 7, &ok) == 7.0 && ok);
  CHECK(ir_type_equal(&out(g, 7)->type, &want));
  CHECK(out_const(g, 8, &ok) == 8.0 && ok);
  want = ty(IR_DT_F32, 2, 3, 2, 0);
  CHECK(ir_type_equal(&out(g, 8)->type, &want));
  CHECK(out_const(g, 9, &ok) == 9.0 && ok);
  CHECK(ir_type_equal(&out(g, 9)->type, &want));
  CHECK_EQ_INT(g->n_nodes, g->n_outputs); /* every operand const is gone */
  ir_graph_free(g);
}

/* Folding equals the runtime executing the unfolded graph, bit for bit. */
static void test_fold_bit_exact(ir_dtype dt) {
  static const double vals[] = {0.1, -0.0, 0.0, 1.5, 3.7, -2.25, 1e-3, 100.0, -1.0, 1e30, 0.7};
  enum { NV = sizeof vals / sizeof vals[0] };
  static const ir_op unary[] = {IR_OP_NEG, IR_OP_ABS,  IR_OP_EXP,     IR_OP_LOG,  IR_OP_SQRT,
                                IR_OP_RSQRT, IR_OP_SIN, IR_OP_COS,    IR_OP_TANH, IR_OP_SIGMOID,
                                IR_OP_RELU, IR_OP_GELU, IR_OP_SILU,   IR_OP_SQUARE};
  static const ir_op binary[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_POW, IR_OP_MAXIMUM,
                                 IR_OP_MINIMUM, IR_OP_EQ, IR_OP_NE, IR_OP_LT, IR_OP_LE, IR_OP_GT, IR_OP_GE};
  ir_graph *g = ir_graph_new("bits", NULL);
  int n_out = 0;
  double expect[sizeof unary / sizeof unary[0] * NV + sizeof binary / sizeof binary[0] * NV * NV];
  for (size_t u = 0; u < sizeof unary / sizeof unary[0]; u++)
    for (int i = 0; i < NV; i++) {
      ir_value *y = op1(g, unary[u], cst(g, scalar(dt), vals[i]), NULL);
      ir_graph_add_output(g, y->name, y);
      expect[n_out++] = ir_round_to_dtype(dt, ir_eval_unary(unary[u], ir_round_to_dtype(dt, vals[i])));
    }
  for (size_t b = 0; b < sizeof binary / sizeof binary[0]; b++)
    for (int i = 0; i < NV; i++)
      for (int j = 0; j < NV; j++) {
        ir_value *y = op2(g, binary[b], cst(g, scalar(dt), vals[i]), cst(g, scalar(dt), vals[j]), NULL);
        ir_graph_add_output(g, y->name, y);
        expect[n_out++] = ir_round_to_dtype(y->type.dtype, ir_eval_binary(binary[b], ir_round_to_dtype(dt, vals[i]),
                                                                         ir_round_to_dtype(dt, vals[j])));
      }
  rt_tensor **before = calloc((size_t)n_out, sizeof *before);
  char err[256] = "";
  rt_stats stats = {0};
  int rc = rt_run(&rt_cpu_backend, g, NULL, NULL, before, &stats, err, sizeof err);
  CHECK_EQ_INT(rc, 0);
  if (rc) fprintf(stderr, "cpu backend: %s\n", err);
  run_canon(g);
  int mismatches = 0;
  for (int i = 0; i < n_out; i++) {
    bool ok;
    double v = out_const(g, i, &ok);
    double r = rc == 0 && before[i] ? rt_tensor_get(before[i], 0) : v;
    if (!ok || !same_bits(v, expect[i]) || !same_bits(v, r)) {
      if (mismatches++ < 5)
        fprintf(stderr, "%s fold mismatch at output %d (%s): folded %.17g (const %d), formula %.17g, runtime %.17g\n",
                ir_dtype_name(dt), i, g->outputs[i].name, v, ok, expect[i], r);
    }
    rt_tensor_free(before[i]);
  }
  CHECK_EQ_INT(mismatches, 0);
  free(before);
  ir_graph_free(g);
}

/* ---- exact algebra ---- */

static void test_algebra_fires(void) {
  ir_graph *g = ir_graph_new("alg", NULL);
  ir_type t = ty(IR_DT_F32, 2, 2, 3, 0);
  ir_value *x = ir_graph_add_input(g, "x", t, L(1));
  ir_value *one = cst(g, scalar(IR_DT_F32), 1);
  ir_graph_add_output(g, "mul1", op2(g, IR_OP_MUL, x, one, "a"));
  ir_graph_add_output(g, "mul1l", op2(g, IR_OP_MUL, cst(g, t, 1), x, "b"));
  ir_graph_add_output(g, "div1", op2(g, IR_OP_DIV, x, one, "c"));
  ir_graph_add_output(g, "sub0", op2(g, IR_OP_SUB, x, cst(g, scalar(IR_DT_F32), 0.0), "d"));
  ir_graph_add_output(g, "addm0", op2(g, IR_OP_ADD, x, cst(g, scalar(IR_DT_F32), -0.0), "e"));
  ir_graph_add_output(g, "addm0l", op2(g, IR_OP_ADD, cst(g, scalar(IR_DT_F32), -0.0), x, "f"));
  ir_graph_add_output(g, "negneg", op1(g, IR_OP_NEG, op1(g, IR_OP_NEG, x, NULL), "h"));
  ir_graph_add_output(g, "cast", op1a(g, IR_OP_CAST, x, ir_attr_dtype("to", IR_DT_F32), "i"));
  int64_t shape[2] = {2, 3}, perm[2] = {0, 1};
  ir_graph_add_output(g, "reshape", op1a(g, IR_OP_RESHAPE, x, ir_attr_ints("shape", shape, 2), "j"));
  ir_graph_add_output(g, "bcast", op1a(g, IR_OP_BROADCAST, x, ir_attr_ints("shape", shape, 2), "k"));
  ir_graph_add_output(g, "tid", op1a(g, IR_OP_TRANSPOSE, x, ir_attr_ints("perm", perm, 2), "l"));
  ir_value *cond = ir_graph_add_input(g, "cond", ty(IR_DT_BOOL, 2, 2, 3, 0), L(1));
  ir_value *y = ir_graph_add_input(g, "y", t, L(1));
  ir_graph_add_output(g, "where_same", op3(g, IR_OP_WHERE, cond, x, x, "m"));
  ir_graph_add_output(g, "where_true", op3(g, IR_OP_WHERE, cst(g, scalar(IR_DT_BOOL), 1), x, y, "n"));
  ir_graph_add_output(g, "where_false", op3(g, IR_OP_WHERE, cst(g, scalar(IR_DT_BOOL), 0), y, x, "o"));
  ir_graph_add_output(g, "and_same", op2(g, IR_OP_AND, cond, cond, "p"));
  /* x * (1 broadcast to x's shape by a foldable broadcast) */
  ir_value *ones = op1a(g, IR_OP_BROADCAST, one, ir_attr_ints("shape", shape, 2), "ones");
  ir_graph_add_output(g, "mul_bcast_one", op2(g, IR_OP_MUL, x, ones, "q"));
  int n_out = g->n_outputs;
  run_canon(g);
  CHECK_EQ_INT(g->n_outputs, n_out);
  CHECK_EQ_INT(g->n_nodes, 0);
  for (int i = 0; i < g->n_outputs; i++) {
    ir_value *want = strcmp(g->outputs[i].name, "and_same") == 0 ? cond : x;
    if (out(g, i) != want) fprintf(stderr, "rule for output %s did not fire\n", g->outputs[i].name);
    CHECK(out(g, i) == want);
  }
  CHECK_STR(g->outputs[0].name, "mul1");
  CHECK_EQ_INT(g->n_inputs, 3);
  ir_graph_free(g);

  /* integers: x + 0 and 0 + x are exact */
  g = ir_graph_new("ints", NULL);
  ir_value *xi = ir_graph_add_input(g, "xi", ty(IR_DT_I32, 1, 4, 0, 0), L(1));
  ir_graph_add_output(g, "a", op2(g, IR_OP_ADD, xi, cst(g, scalar(IR_DT_I32), 0), "a"));
  ir_graph_add_output(g, "b", op2(g, IR_OP_ADD, cst(g, scalar(IR_DT_I32), 0), xi, "b"));
  run_canon(g);
  CHECK(out(g, 0) == xi && out(g, 1) == xi);
  ir_graph_free(g);
}

static void test_algebra_forbidden(void) {
  ir_graph *g = ir_graph_new("unsafe", NULL);
  ir_type t = ty(IR_DT_F32, 2, 2, 3, 0);
  ir_value *x = ir_graph_add_input(g, "x", t, L(1));
  ir_value *v = ir_graph_add_input(g, "v", ty(IR_DT_F32, 1, 3, 0, 0), L(1));
  ir_value *zero = cst(g, scalar(IR_DT_F32), 0.0), *mzero = cst(g, scalar(IR_DT_F32), -0.0);
  struct { const char *name; ir_op op; } want[] = {
      {"add0", IR_OP_ADD},    {"add0l", IR_OP_ADD}, {"mul0", IR_OP_MUL},   {"subm0", IR_OP_SUB},
      {"subxx", IR_OP_SUB},   {"divxx", IR_OP_DIV}, {"mulbig", IR_OP_MUL}, {"addbig", IR_OP_ADD},
      {"cast64", IR_OP_CAST}, {"max", IR_OP_MAXIMUM}, {"mul2", IR_OP_MUL}, {"bcast", IR_OP_BROADCAST},
  };
  ir_graph_add_output(g, "add0", op2(g, IR_OP_ADD, x, zero, "a"));      /* -0 + 0 = +0 */
  ir_graph_add_output(g, "add0l", op2(g, IR_OP_ADD, zero, x, "b"));
  ir_graph_add_output(g, "mul0", op2(g, IR_OP_MUL, x, zero, "c"));      /* NaN, inf, -0 */
  ir_graph_add_output(g, "subm0", op2(g, IR_OP_SUB, x, mzero, "d"));    /* -0 - -0 = +0 */
  ir_graph_add_output(g, "subxx", op2(g, IR_OP_SUB, x, x, "e"));        /* NaN, inf */
  ir_graph_add_output(g, "divxx", op2(g, IR_OP_DIV, x, x, "f"));        /* 0, NaN, inf */
  /* the 1 broadcasts v[3] to [2, 3]: the result is not v */
  ir_graph_add_output(g, "mulbig", op2(g, IR_OP_MUL, v, cst(g, t, 1), "h"));
  ir_graph_add_output(g, "addbig", op2(g, IR_OP_ADD, v, cst(g, t, -0.0), "i"));
  ir_graph_add_output(g, "cast64", op1a(g, IR_OP_CAST, x, ir_attr_dtype("to", IR_DT_F64), "j"));
  ir_graph_add_output(g, "max", op2(g, IR_OP_MAXIMUM, x, x, "k"));      /* NaN sign is canonicalized */
  ir_graph_add_output(g, "mul2", op2(g, IR_OP_MUL, x, cst(g, scalar(IR_DT_F32), 1.0000001), "l")); /* f32: not 1 */
  int64_t shape[2] = {2, 3};
  ir_graph_add_output(g, "bcast", op1a(g, IR_OP_BROADCAST, v, ir_attr_ints("shape", shape, 2), "m"));
  run_canon(g);
  CHECK_EQ_INT(g->n_outputs, (int)(sizeof want / sizeof want[0]));
  for (int i = 0; i < g->n_outputs && i < (int)(sizeof want / sizeof want[0]); i++) {
    CHECK_STR(g->outputs[i].name, want[i].name);
    const ir_node *d = out(g, i)->def;
    bool kept = d && d->op == want[i].op;
    if (!kept) fprintf(stderr, "unsafe rewrite applied to %s\n", want[i].name);
    CHECK(kept);
  }
  ir_graph_free(g);
}

static void test_chains(void) {
  ir_graph *g = ir_graph_new("chains", NULL);
  ir_value *x = ir_graph_add_input(g, "x", ty(IR_DT_F32, 3, 2, 3, 4), L(1));
  int64_t s24[1] = {24}, s64[2] = {6, 4}, s234[3] = {2, 3, 4};
  /* reshape(reshape(x)) -> reshape(x) */
  ir_value *r1 = op1a(g, IR_OP_RESHAPE, x, ir_attr_ints("shape", s24, 1), "r1");
  ir_value *r2 = op1a(g, IR_OP_RESHAPE, r1, ir_attr_ints("shape", s64, 2), "r2");
  ir_graph_add_output(g, "r", r2);
  /* reshape back to x's shape -> x */
  ir_value *r3 = op1a(g, IR_OP_RESHAPE, op1a(g, IR_OP_RESHAPE, x, ir_attr_ints("shape", s24, 1), "r4"),
                      ir_attr_ints("shape", s234, 3), "r3");
  ir_graph_add_output(g, "rback", r3);
  /* transpose(transpose(x)) composing to the identity -> x */
  int64_t p120[3] = {1, 2, 0}, p201[3] = {2, 0, 1}, p102[3] = {1, 0, 2};
  ir_value *t1 = op1a(g, IR_OP_TRANSPOSE, x, ir_attr_ints("perm", p120, 3), "t1");
  ir_graph_add_output(g, "tid", op1a(g, IR_OP_TRANSPOSE, t1, ir_attr_ints("perm", p201, 3), "t2"));
  /* ... and to another permutation: one transpose with perm p1[p2[i]] = [2, 1, 0] */
  ir_value *t3 = op1a(g, IR_OP_TRANSPOSE, op1a(g, IR_OP_TRANSPOSE, x, ir_attr_ints("perm", p120, 3), "t4"),
                      ir_attr_ints("perm", p102, 3), "t3");
  ir_graph_add_output(g, "t", t3);
  /* broadcast(broadcast(x)) -> broadcast(x) */
  ir_value *v = ir_graph_add_input(g, "v", ty(IR_DT_F32, 1, 4, 0, 0), L(1));
  int64_t b34[2] = {3, 4};
  ir_value *b1 = op1a(g, IR_OP_BROADCAST, v, ir_attr_ints("shape", b34, 2), "b1");
  ir_graph_add_output(g, "b", op1a(g, IR_OP_BROADCAST, b1, ir_attr_ints("shape", s234, 3), "b2"));
  run_canon(g);
  CHECK(out(g, 0) == r2 && r2->def->op == IR_OP_RESHAPE && r2->def->in[0] == x);
  CHECK(out(g, 1) == x);
  CHECK(out(g, 2) == x);
  const ir_node *t = out(g, 3)->def;
  CHECK(t && t->op == IR_OP_TRANSPOSE && t->in[0] == x);
  if (t && t->op == IR_OP_TRANSPOSE) {
    const ir_attr *p = ir_node_attr(t, "perm");
    CHECK(p && p->n == 3 && p->ints[0] == 2 && p->ints[1] == 1 && p->ints[2] == 0);
    ir_type want = ty(IR_DT_F32, 3, 4, 3, 2);
    CHECK(ir_type_equal(&out(g, 3)->type, &want));
    CHECK_STR(out(g, 3)->name, "t3");
  }
  const ir_node *b = out(g, 4)->def;
  CHECK(b && b->op == IR_OP_BROADCAST && b->in[0] == v);
  CHECK_EQ_INT(count_op(g, IR_OP_RESHAPE), 1);
  CHECK_EQ_INT(count_op(g, IR_OP_TRANSPOSE), 1);
  CHECK_EQ_INT(count_op(g, IR_OP_BROADCAST), 1);
  CHECK_EQ_INT(g->n_nodes, 3);
  ir_graph_free(g);
}

/* ---- CSE and DCE ---- */

static void test_cse(void) {
  ir_graph *g = ir_graph_new("cse", NULL);
  ir_type t = ty(IR_DT_F32, 2, 2, 4, 0);
  ir_value *x = ir_graph_add_input(g, "x", t, L(1));
  ir_value *a = op1(g, IR_OP_EXP, x, "a"), *b = op1(g, IR_OP_EXP, x, "b");
  ir_graph_add_output(g, "s", op2(g, IR_OP_ADD, a, b, "s"));
  /* chains merge transitively: tanh(a) and tanh(b) become one */
  ir_graph_add_output(g, "u", op2(g, IR_OP_MUL, op1(g, IR_OP_TANH, a, "ta"), op1(g, IR_OP_TANH, b, "tb"), "u"));
  /* different attributes are not merged */
  ir_graph_add_output(g, "sm0", op1a(g, IR_OP_SOFTMAX, x, ir_attr_int("axis", 0), "sm0"));
  ir_graph_add_output(g, "sm1", op1a(g, IR_OP_SOFTMAX, x, ir_attr_int("axis", 1), "sm1"));
  ir_graph_add_output(g, "sm1b", op1a(g, IR_OP_SOFTMAX, x, ir_attr_int("axis", 1), "sm1b"));
  /* +0.0 and -0.0 constants are different */
  ir_graph_add_output(g, "pz", cst(g, scalar(IR_DT_F32), 0.0));
  ir_graph_add_output(g, "nz", cst(g, scalar(IR_DT_F32), -0.0));
  ir_graph_add_output(g, "pz2", cst(g, scalar(IR_DT_F32), 0.0));
  /* multi-result nodes */
  int64_t sizes[2] = {1, 3};
  ir_attr sp[2] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", sizes, 2)};
  char err[256];
  ir_node *s1 = ir_graph_build(g, IR_OP_SPLIT, &x, 1, sp, 2, NULL, "p", L(5), err, sizeof err);
  ir_node *s2 = ir_graph_build(g, IR_OP_SPLIT, &x, 1, sp, 2, NULL, "q", L(6), err, sizeof err);
  CHECK(s1 && s2);
  if (s1 && s2) {
    ir_graph_add_output(g, "p1", s1->out[1]);
    ir_graph_add_output(g, "q1", s2->out[1]);
  }
  run_canon(g);
  CHECK_EQ_INT(count_op(g, IR_OP_EXP), 1);
  CHECK_EQ_INT(count_op(g, IR_OP_TANH), 1);
  ir_node *s = out(g, 0)->def;
  CHECK(s && s->in[0] == s->in[1] && s->in[0] == a);
  ir_node *u = out(g, 1)->def;
  CHECK(u && u->in[0] == u->in[1]);
  CHECK(out(g, 2) != out(g, 3));
  CHECK(out(g, 3) == out(g, 4));
  CHECK(out(g, 5) != out(g, 6));
  CHECK(out(g, 5) == out(g, 7));
  CHECK_EQ_INT(count_op(g, IR_OP_SPLIT), 1);
  if (s1 && s2) CHECK(out(g, 8) == out(g, 9));
  CHECK_STR(g->outputs[4].name, "sm1b");
  ir_graph_free(g);
}

static void test_dce(void) {
  ir_graph *g = ir_graph_new("dce", NULL);
  ir_type t = ty(IR_DT_F32, 1, 4, 0, 0);
  ir_value *x = ir_graph_add_input(g, "x", t, L(1));
  ir_graph_add_input(g, "unused_in", t, L(1));
  ir_value *w = ir_graph_add_param(g, "w", t, (ir_init){IR_INIT_ZEROS, 0, 0}, L(2));
  ir_graph_add_param(g, "unused_w", t, (ir_init){IR_INIT_ONES, 0, 0}, L(2));
  ir_value *dead = op1(g, IR_OP_SIN, op1(g, IR_OP_COS, x, "dc"), "ds");
  (void)dead;
  ir_value *y = op2(g, IR_OP_MUL, x, w, "y");
  op1(g, IR_OP_EXP, y, "dead_user_of_live");
  ir_graph_add_output(g, "y", y);
  run_canon(g);
  CHECK_EQ_INT(g->n_nodes, 1);
  CHECK(out(g, 0) == y);
  CHECK_EQ_INT(g->n_inputs, 2);
  CHECK_EQ_INT(g->n_params, 2);
  CHECK(ir_graph_find_value(g, "unused_in") != NULL);
  CHECK(ir_graph_find_value(g, "unused_w") != NULL);
  CHECK(ir_graph_find_value(g, "ds") == NULL);
  CHECK_EQ_INT(g->n_values, 5);
  for (int i = 0; i < g->n_values; i++) CHECK_EQ_INT(g->values[i]->id, i);
  ir_graph_free(g);
}

/* A second run changes nothing: the pass reaches its fixpoint. */
static void test_idempotent(void) {
  ir_graph *g = ir_graph_new("fix", NULL);
  ir_value *x = ir_graph_add_input(g, "x", ty(IR_DT_BF16, 2, 2, 2, 0), L(1));
  ir_value *c = op2(g, IR_OP_DIV, cst(g, scalar(IR_DT_BF16), 1), cst(g, scalar(IR_DT_BF16), 3), "third");
  ir_value *y = op2(g, IR_OP_MUL, op1(g, IR_OP_NEG, op1(g, IR_OP_NEG, x, NULL), NULL), c, "y");
  ir_value *z = op2(g, IR_OP_MUL, x, c, "z");
  ir_graph_add_output(g, "y", y);
  ir_graph_add_output(g, "z", z);
  run_canon(g);
  CHECK(out(g, 0) == out(g, 1)); /* neg(neg(x)) * c == x * c after CSE */
  const ir_node *m = out(g, 0)->def;
  CHECK(m && m->op == IR_OP_MUL && m->in[0] == x);
  if (m && m->n_in == 2 && m->in[1]->def) {
    CHECK(m->in[1]->def->op == IR_OP_CONST);
    CHECK(ir_node_attr_float(m->in[1]->def, "value", 0) ==
          ir_round_to_dtype(IR_DT_BF16, ir_eval_binary(IR_OP_DIV, 1, 3)));
  }
  char *first = ir_print_to_string(g);
  run_canon(g);
  char *second = ir_print_to_string(g);
  CHECK(first && second && strcmp(first, second) == 0);
  free(first);
  free(second);
  ir_graph_free(g);
}

int main(void) {
  diag = ir_diag_new(stderr);
  test_fold_scalar_chain();
  test_fold_broadcast_compare_where_cast();
  test_fold_bit_exact(IR_DT_F32);
  test_fold_bit_exact(IR_DT_BF16);
  test_algebra_fires();
  test_algebra_forbidden();
  test_chains();
  test_cse();
  test_dce();
  test_idempotent();
  CHECK_EQ_INT(ir_diag_errors(diag), 0);
  ir_diag_free(diag);
  return check_done();
}
