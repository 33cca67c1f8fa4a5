/* tests/unit/test_runtime_kernels.c — every CPU kernel against a naive
 * reference loop written here.
 *
 * Each case builds a one-node graph with ir_graph_build, verifies it, fills
 * the inputs with seeded random numbers, runs it on rt_cpu_backend and
 * compares every element with the reference. Tolerances (relative,
 * |got - want| <= tol * max(1, |want|)):
 *   - elementwise, layout, cast, const/iota, embedding, causal_mask: exact
 *     (0) — kernels and references both use ir_eval_* + ir_round_to_dtype;
 *   - f64 matmul, reductions, softmax, norms, cross_entropy, einsum: 1e-12;
 *   - f32 of the same: 1e-5; bf16 matmul 1e-2, f16 matmul 2e-3 (storage
 *     precision: 8 and 11 significant bits).
 * Autodiff helpers (unslice, embedding_grad, cross_entropy_grad, causal_mask
 * with fill): unslice exact, the others 1e-12 (f64) / 1e-6 (f32); sign and
 * gelu_grad run in the unary loop.
 * matmul with transpose_a / transpose_b (every dtype path, batched with
 * broadcast, the shared-W f32 path) against matmul of explicit transposes:
 * the same bytes in every dtype.
 * layernorm_grad and rmsnorm_grad against the primitive ops of the
 * expansion they replaced (1e-12 f64, 1e-5 f32).
 * rt_bf16_bits / rt_bf16_value (kernels.h, the inline conversions of the
 * bf16 fast paths) against ir_f32_to_bf16, ir_bf16_to_f32 and
 * ir_round_to_dtype: every bf16 pattern, each with low halves at the ties,
 * around them, 0, the maximum and random ones (NaNs: both a NaN); and
 * rt_round_bf16 (internal.h) against ir_round_to_dtype on doubles of every
 * bf16 exponent and beyond (ties, near-ties, random; specials).
 * Also: the missing-kernel loop over ops.def (grad is the one op with no
 * kernel: the autodiff pass expands it).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "testgraph.h"
#include "kernels.h"
#include "pass.h"
#include "runtime.h"
#include "scalar.h"

static const ir_loc NOLOC = {0};


/* ---- running one-node graphs -------------------------------------------- */

typedef struct {
  ir_graph *g;
  ir_value *in[8];
  rt_tensor *tin[8];
  int n_in;
  ir_node *node;
  rt_tensor *out[8];
  uint64_t seed;
} tcase;

static void tc_begin(tcase *c, const char *name) {
  memset(c, 0, sizeof *c);
  c->g = ir_graph_new(name, "kern.tg");
  c->seed = rt_hash_name(name);
}

/* Adds an input filled with random values; shift/scale transform floats,
 * integers are uniform in [0, int_high). */
static ir_value *tc_input(tcase *c, ir_type t, int64_t int_high, double scale, double shift) {
  char name[16];
  snprintf(name, sizeof name, "x%d", c->n_in);
  ir_value *v = ir_graph_add_input(c->g, name, t, NOLOC);
  rt_tensor *x = rt_tensor_new(&t);
  rt_fill_random(x, c->seed, name, int_high);
  if (ir_dtype_is_float(t.dtype)) {
    int64_t n = ir_type_numel(&t);
    for (int64_t i = 0; i < n; i++) rt_tensor_set(x, i, rt_tensor_get(x, i) * scale + shift);
  }
  c->in[c->n_in] = v;
  c->tin[c->n_in++] = x;
  return v;
}

/* Builds the node and runs the graph; 0 on success. */
static int tc_run(tcase *c, ir_op op, const ir_attr *attrs, int n_attrs, const ir_type *out_type) {
  char err[512];
  c->node = ir_graph_build(c->g, op, c->in, c->n_in, attrs, n_attrs, out_type, "r", NOLOC, err, sizeof err);
  if (!c->node) {
    fprintf(stderr, "build %s failed: %s\n", ir_op_name(op), err);
    CHECK(c->node != NULL);
    return -1;
  }
  for (int i = 0; i < c->node->n_out; i++) ir_graph_add_output(c->g, c->node->out[i]->name, c->node->out[i]);
  ir_diag *d = ir_diag_new(stderr);
  int problems = ir_verify(c->g, d);
  ir_diag_free(d);
  CHECK_EQ_INT(problems, 0);
  rt_stats st = {0};
  int rc = rt_run(&rt_cpu_backend, c->g, c->tin, NULL, c->out, &st, err, sizeof err);
  if (rc != 0) fprintf(stderr, "run %s failed: %s\n", ir_op_name(op), err);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) CHECK_EQ_INT(st.kernels_run, ir_op_has(op, IR_OPF_VIEW) ? 0 : 1); /* a view runs no kernel */
  return rc;
}

static void tc_end(tcase *c) {
  for (int i = 0; i < c->n_in; i++) rt_tensor_free(c->tin[i]);
  for (int i = 0; i < 8; i++) rt_tensor_free(c->out[i]);
  ir_graph_free(c->g);
}

/* Compares got with want[] (numel doubles), printing the first mismatches
 * and the max difference. tol 0 = exact (NaN equals NaN, inf equals inf). */
static void compare(const char *what, const rt_tensor *got, const double *want, double tol) {
  int64_t n = ir_type_numel(&got->type);
  int bad = 0;
  double maxdiff = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = rt_tensor_get(got, i), w = want[i];
    bool ok;
    if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
    else if (isinf(w) || isinf(g)) ok = g == w;
    else {
      double diff = fabs(g - w), scale = fabs(w) > 1 ? fabs(w) : 1;
      if (diff / scale > maxdiff) maxdiff = diff / scale;
      ok = diff <= tol * scale;
    }
    if (!ok && bad++ < 3) fprintf(stderr, "  %s: element %lld: got %.17g want %.17g\n", what, (long long)i, g, w);
  }
  if (bad) fprintf(stderr, "  %s: %d of %lld elements differ, max rel diff %g (tol %g)\n", what, bad, (long long)n, maxdiff, tol);
  CHECK(bad == 0);
}

/* ---- naive index helpers for references ------------------------------------ */

static void unravel(int64_t o, const ir_type *t, int64_t *idx) {
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = t->dims[d] ? o % t->dims[d] : 0;
    o = t->dims[d] ? o / t->dims[d] : 0;
  }
}

/* Linear index in t of the result index idx (rank out_rank), numpy broadcast. */
static int64_t bcast_index(const ir_type *t, int out_rank, const int64_t *idx) {
  int64_t li = 0;
  for (int d = 0; d < t->rank; d++) {
    int64_t i = t->dims[d] == 1 ? 0 : idx[d + out_rank - t->rank];
    li = li * t->dims[d] + i;
  }
  return li;
}

static int64_t ravel(const ir_type *t, const int64_t *idx) {
  int64_t li = 0;
  for (int d = 0; d < t->rank; d++) li = li * t->dims[d] + idx[d];
  return li;
}

static double *alloc_want(const rt_tensor *t) {
  int64_t n = ir_type_numel(&t->type);
  return calloc((size_t)(n ? n : 1), sizeof(double));
}

/* ---- elementwise ----------------------------------------------------------- */

static bool needs_positive(ir_op op) { return op == IR_OP_LOG || op == IR_OP_SQRT || op == IR_OP_RSQRT; }

static void test_unary(void) {
  static const ir_op ops[] = {
#define OP(id, name, nin, nout, kind, flags, flops, scalar) IR_OPK_##kind == IR_OPK_UNARY ? IR_OP_##id : IR_NUM_OPS,
#include "ops.def"
#undef OP
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    ir_op op = ops[i];
    if (op == IR_NUM_OPS || op == IR_OP_CAST) continue;
    ir_dtype dts[] = {IR_DT_F64, IR_DT_F32, IR_DT_BF16, IR_DT_F16};
    for (int k = 0; k < 4; k++) {
      ir_dtype dt = op == IR_OP_NOT ? IR_DT_BOOL : dts[k];
      if (op == IR_OP_NOT && k > 0) break;
      tcase c;
      tc_begin(&c, ir_op_name(op));
      bool pos = needs_positive(op);
      tc_input(&c, T(dt, 3, D(2), D(3), D(5)), 2, pos ? 0.5 : 2.0, pos ? 2.0 : 0.0);
      if (pos) /* |x| keeps log/sqrt in their domain */
        for (int64_t j = 0; j < 30; j++) rt_tensor_set(c.tin[0], j, fabs(rt_tensor_get(c.tin[0], j)) + 0.01);
      if (tc_run(&c, op, NULL, 0, NULL) == 0) {
        double *want = alloc_want(c.out[0]);
        for (int64_t j = 0; j < 30; j++)
          want[j] = ir_round_to_dtype(dt, ir_eval_unary(op, rt_tensor_get(c.tin[0], j)));
        char what[64];
        snprintf(what, sizeof what, "%s %s", ir_op_name(op), ir_dtype_name(dt));
        compare(what, c.out[0], want, 0);
        free(want);
      }
      tc_end(&c);
    }
  }
}

/* Every dtype to every dtype, through values that round, saturate and truncate. */
static void test_cast(void) {
  static const double vals[] = {-2.7, -0.5, 0.0, 0.3, 1.5, 2.5, 127.9, 300.25, 65519.0, 70000.5, 1e10, -3e9,
                                1.0 / 3.0, 1e-8, NAN, INFINITY};
  int nv = (int)(sizeof vals / sizeof vals[0]);
  for (int from = 0; from < IR_NUM_DTYPES; from++)
    for (int to = 0; to < IR_NUM_DTYPES; to++) {
      tcase c;
      tc_begin(&c, "cast");
      tc_input(&c, T((ir_dtype)from, 2, D(4), D(4)), 2, 1, 0);
      for (int j = 0; j < nv; j++) rt_tensor_set(c.tin[0], j, vals[j]);
      ir_attr a = ir_attr_dtype("to", (ir_dtype)to);
      if (tc_run(&c, IR_OP_CAST, &a, 1, NULL) == 0) {
        CHECK_EQ_INT(c.out[0]->type.dtype, to);
        double want[16];
        for (int j = 0; j < nv; j++) want[j] = ir_round_to_dtype((ir_dtype)to, rt_tensor_get(c.tin[0], j));
        char what[64];
        snprintf(what, sizeof what, "cast %s->%s", ir_dtype_name((ir_dtype)from), ir_dtype_name((ir_dtype)to));
        compare(what, c.out[0], want, 0);
        /* spot checks of the semantics themselves */
        if (from == IR_DT_F64 && to == IR_DT_I32) {
          CHECK_EQ_INT(((int32_t *)c.out[0]->data)[0], -2);
          CHECK_EQ_INT(((int32_t *)c.out[0]->data)[6], 127);
        }
        if (from == IR_DT_F64 && to == IR_DT_BOOL) CHECK_EQ_INT(((uint8_t *)c.out[0]->data)[1], 1);
      }
      tc_end(&c);
    }
}

typedef struct {
  ir_type a, b;
} shape_pair;

static void test_binary(void) {
  static const ir_op ops[] = {
#define OP(id, name, nin, nout, kind, flags, flops, scalar) IR_OPK_##kind == IR_OPK_BINARY ? IR_OP_##id : IR_NUM_OPS,
#include "ops.def"
#undef OP
  };
  shape_pair shapes[] = {
      {T(IR_DT_F64, 3, D(2), D(1), D(4)), T(IR_DT_F64, 2, D(3), D(1))}, /* -> [2,3,4] */
      {T(IR_DT_F64, 2, D(3), D(4)), T(IR_DT_F64, 2, D(3), D(4))},       /* same shape: fast path */
      {T(IR_DT_F64, 0), T(IR_DT_F64, 1, D(5))},                         /* scalar with vector */
      {T(IR_DT_F64, 4, D(2), D(3), D(1), D(2)), T(IR_DT_F64, 1, D(1))}, /* size-1 everything */
      {T(IR_DT_F64, 2, D(1), D(3)), T(IR_DT_F64, 3, D(2), D(4), D(1))},   /* both sides broadcast */
  };
  ir_dtype dts[] = {IR_DT_F64, IR_DT_F32, IR_DT_BF16, IR_DT_F16, IR_DT_I32, IR_DT_I64};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    ir_op op = ops[i];
    if (op == IR_NUM_OPS) continue;
    bool logical = op == IR_OP_AND || op == IR_OP_OR;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int k = 0; k < 6; k++) {
        ir_dtype dt = logical ? IR_DT_BOOL : dts[k];
        if (logical && k > 0) break;
        ir_type ta = shapes[s].a, tb = shapes[s].b;
        ta.dtype = tb.dtype = dt;
        tcase c;
        tc_begin(&c, ir_op_name(op));
        bool pow = op == IR_OP_POW;
        tc_input(&c, ta, 7, pow ? 0.5 : 2.0, pow ? 2.0 : 0.0);
        tc_input(&c, tb, 7, 2.0, 0.0);
        if (dt != IR_DT_BOOL && !pow) rt_tensor_set(c.tin[1], 0, rt_tensor_get(c.tin[0], 0)); /* some equal pairs */
        if (pow)
          for (int64_t j = 0; j < ir_type_numel(&ta); j++) rt_tensor_set(c.tin[0], j, fabs(rt_tensor_get(c.tin[0], j)));
        if (op == IR_OP_DIV && !ir_dtype_is_float(dt)) /* no integer division by zero in the test */
          for (int64_t j = 0; j < ir_type_numel(&tb); j++)
            if (rt_tensor_get(c.tin[1], j) == 0) rt_tensor_set(c.tin[1], j, 3);
        if (tc_run(&c, op, NULL, 0, NULL) != 0) {
          tc_end(&c);
          continue;
        }
        rt_tensor *out = c.out[0];
        double *want = alloc_want(out);
        int64_t idx[IR_MAX_RANK];
        ir_dtype odt = ir_op_is_comparison(op) ? IR_DT_BOOL : dt;
        CHECK_EQ_INT(out->type.dtype, odt);
        for (int64_t o = 0; o < ir_type_numel(&out->type); o++) {
          unravel(o, &out->type, idx);
          double x = rt_tensor_get(c.tin[0], bcast_index(&ta, out->type.rank, idx));
          double y = rt_tensor_get(c.tin[1], bcast_index(&tb, out->type.rank, idx));
          want[o] = ir_round_to_dtype(odt, ir_eval_binary(op, x, y));
        }
        char what[96];
        snprintf(what, sizeof what, "%s %s shapes #%zu", ir_op_name(op), ir_dtype_name(dt), s);
        compare(what, out, want, 0);
        free(want);
        tc_end(&c);
      }
  }
}

static void test_where(void) {
  tcase c;
  tc_begin(&c, "where");
  ir_type tc = T(IR_DT_BOOL, 2, D(3), D(1)), ta = T(IR_DT_F32, 2, D(1), D(4)), tb = T(IR_DT_F32, 0);
  tc_input(&c, tc, 2, 1, 0);
  tc_input(&c, ta, 2, 1, 0);
  tc_input(&c, tb, 2, 1, 0);
  if (tc_run(&c, IR_OP_WHERE, NULL, 0, NULL) == 0) {
    rt_tensor *out = c.out[0];
    CHECK_EQ_INT(out->type.rank, 2);
    double want[12];
    int64_t idx[IR_MAX_RANK];
    for (int64_t o = 0; o < 12; o++) {
      unravel(o, &out->type, idx);
      bool cond = rt_tensor_get(c.tin[0], bcast_index(&tc, 2, idx)) != 0;
      want[o] = cond ? rt_tensor_get(c.tin[1], bcast_index(&ta, 2, idx)) : rt_tensor_get(c.tin[2], 0);
    }
    compare("where", out, want, 0);
  }
  tc_end(&c);
}

/* ---- sources ---------------------------------------------------------------- */

static void test_const_iota(void) {
  tcase c;
  tc_begin(&c, "const");
  ir_type t = T(IR_DT_I32, 2, D(2), D(3));
  ir_attr a = ir_attr_float("value", -2.7);
  if (tc_run(&c, IR_OP_CONST, &a, 1, &t) == 0) {
    double want[6] = {-2, -2, -2, -2, -2, -2};
    compare("const i32", c.out[0], want, 0);
  }
  tc_end(&c);

  tc_begin(&c, "const");
  t = T(IR_DT_BF16, 1, D(3));
  a = ir_attr_float("value", 0.1);
  if (tc_run(&c, IR_OP_CONST, &a, 1, &t) == 0) {
    double v = ir_round_to_dtype(IR_DT_BF16, 0.1), want[3] = {v, v, v};
    compare("const bf16", c.out[0], want, 0);
  }
  tc_end(&c);

  for (int axis = 0; axis < 3; axis++) {
    tc_begin(&c, "iota");
    t = T(axis == 1 ? IR_DT_F32 : IR_DT_I64, 3, D(2), D(3), D(4));
    a = ir_attr_int("axis", axis);
    if (tc_run(&c, IR_OP_IOTA, &a, 1, &t) == 0) {
      double want[24];
      int64_t idx[IR_MAX_RANK];
      for (int64_t o = 0; o < 24; o++) unravel(o, &t, idx), want[o] = (double)idx[axis];
      compare("iota", c.out[0], want, 0);
    }
    tc_end(&c);
  }
}

/* ---- matmul ------------------------------------------------------------------ */

static void check_matmul(ir_type ta, ir_type tb, double tol) {
  tcase c;
  tc_begin(&c, "matmul");
  tc_input(&c, ta, 2, 1, 0);
  tc_input(&c, tb, 2, 1, 0);
  if (tc_run(&c, IR_OP_MATMUL, NULL, 0, NULL) == 0) {
    rt_tensor *out = c.out[0];
    int r = out->type.rank;
    int64_t M = ta.dims[ta.rank - 2], K = ta.dims[ta.rank - 1], N = tb.dims[tb.rank - 1];
    double *want = alloc_want(out);
    int64_t idx[IR_MAX_RANK], ia[IR_MAX_RANK], ib[IR_MAX_RANK];
    for (int64_t o = 0; o < ir_type_numel(&out->type); o++) {
      unravel(o, &out->type, idx);
      /* batch index of each operand: broadcast over the leading dims */
      for (int d = 0; d < ta.rank - 2; d++) ia[d] = ta.dims[d] == 1 ? 0 : idx[d + (r - ta.rank)];
      for (int d = 0; d < tb.rank - 2; d++) ib[d] = tb.dims[d] == 1 ? 0 : idx[d + (r - tb.rank)];
      double acc = 0;
      for (int64_t k = 0; k < K; k++) {
        ia[ta.rank - 2] = idx[r - 2], ia[ta.rank - 1] = k;
        ib[tb.rank - 2] = k, ib[tb.rank - 1] = idx[r - 1];
        acc += rt_tensor_get(c.tin[0], ravel(&ta, ia)) * rt_tensor_get(c.tin[1], ravel(&tb, ib));
      }
      want[o] = acc;
    }
    (void)M, (void)N;
    char what[64];
    snprintf(what, sizeof what, "matmul %s rank %d@%d", ir_dtype_name(ta.dtype), ta.rank, tb.rank);
    compare(what, out, want, tol);
    free(want);
  }
  tc_end(&c);
}

static void test_matmul(void) {
  check_matmul(T(IR_DT_F64, 2, D(3), D(4)), T(IR_DT_F64, 2, D(4), D(5)), 1e-12);
  check_matmul(T(IR_DT_F64, 3, D(2), D(3), D(4)), T(IR_DT_F64, 2, D(4), D(5)), 1e-12);
  check_matmul(T(IR_DT_F64, 4, D(2), D(1), D(3), D(4)), T(IR_DT_F64, 3, D(3), D(4), D(2)), 1e-12);
  check_matmul(T(IR_DT_F32, 4, D(2), D(1), D(3), D(4)), T(IR_DT_F32, 3, D(3), D(4), D(2)), 1e-5);
  check_matmul(T(IR_DT_F32, 3, D(1), D(7), D(33)), T(IR_DT_F32, 3, D(4), D(33), D(9)), 1e-5);
  check_matmul(T(IR_DT_F32, 2, D(1), D(8)), T(IR_DT_F32, 2, D(8), D(1)), 1e-5);
  check_matmul(T(IR_DT_BF16, 3, D(2), D(3), D(8)), T(IR_DT_BF16, 2, D(8), D(5)), 1e-2);
  check_matmul(T(IR_DT_F16, 2, D(3), D(8)), T(IR_DT_F16, 3, D(2), D(8), D(5)), 2e-3);
  check_matmul(T(IR_DT_F64, 2, D(3), D(0)), T(IR_DT_F64, 2, D(0), D(2)), 0); /* K = 0: zeros */
}

/* ---- matmul reading transposed operands ----------------------------------------- */

/* Runs a (stored [..., K, M] when tra) @ b (stored [..., N, K] when trb) as
 * one matmul {transpose_a, transpose_b} (explicit false) or as matmul of
 * explicit last-two-axes transposes (explicit true). checked false builds
 * the nodes without typing (an integer matmul, which ir_infer refuses, to
 * reach the kernel's plain loop). Returns the result (the caller frees). */
static rt_tensor *run_mm_transposed(rt_tensor *a, rt_tensor *b, bool tra, bool trb, bool explicit, bool checked) {
  ir_graph *g = ir_graph_new("mmt", "kern.tg");
  ir_value *in[2] = {ir_graph_add_input(g, "a", a->type, NOLOC), ir_graph_add_input(g, "b", b->type, NOLOC)};
  bool tr[2] = {tra, trb};
  ir_attr attrs[2];
  int n_attrs = 0;
  for (int i = 0; i < 2; i++) {
    if (!tr[i]) continue;
    if (!explicit) {
      attrs[n_attrs++] = ir_attr_int(i == 0 ? "transpose_a" : "transpose_b", 1);
      continue;
    }
    int r = in[i]->type.rank;
    int64_t perm[IR_MAX_RANK];
    for (int d = 0; d < r; d++) perm[d] = d;
    perm[r - 2] = r - 1, perm[r - 1] = r - 2;
    ir_attr pa = ir_attr_ints("perm", perm, r);
    ir_type t = in[i]->type;
    t.dims[r - 2] = in[i]->type.dims[r - 1], t.dims[r - 1] = in[i]->type.dims[r - 2];
    in[i] = ir_graph_add_node(g, IR_OP_TRANSPOSE, &in[i], 1, &t, 1, &pa, 1, NULL, NOLOC)->out[0];
  }
  ir_value *y;
  if (checked) {
    y = ir_graph_build1(g, IR_OP_MATMUL, in, 2, attrs, n_attrs, "y", NOLOC);
  } else { /* in[] are read as they are now: explicit, or the untransposed type rule */
    const ir_type *ta = &in[0]->type, *tb = &in[1]->type;
    ir_type t = {.dtype = ta->dtype, .rank = ta->rank};
    memcpy(t.dims, ta->dims, sizeof t.dims);
    t.dims[t.rank - 2] = ta->dims[ta->rank - (!explicit && tra ? 1 : 2)];
    t.dims[t.rank - 1] = tb->dims[tb->rank - (!explicit && trb ? 2 : 1)];
    y = ir_graph_add_node(g, IR_OP_MATMUL, in, 2, &t, 1, attrs, n_attrs, NULL, NOLOC)->out[0];
  }
  ir_graph_add_output(g, "y", y);
  rt_tensor *tin[2] = {a, b}, *out[1] = {NULL};
  rt_stats st = {0};
  char err[512];
  if (rt_run(&rt_cpu_backend, g, tin, NULL, out, &st, err, sizeof err) != 0) {
    fprintf(stderr, "matmul transposed: %s\n", err);
    CHECK(false);
  }
  ir_graph_free(g);
  return out[0];
}

/* a and b hold random values of the stored types; the product read through
 * the attributes against the product of explicit transposes: tol 0 = the
 * same bytes, else relative. Returns whether the bytes were the same. */
static bool check_matmul_transposed(ir_type sa, ir_type sb, bool tra, bool trb, double tol, bool checked) {
  char what[160], ta_s[64], tb_s[64];
  snprintf(what, sizeof what, "matmul %s @ %s%s%s", ir_type_str(&sa, ta_s, sizeof ta_s),
           ir_type_str(&sb, tb_s, sizeof tb_s), tra ? " transpose_a" : "", trb ? " transpose_b" : "");
  rt_tensor *a = rt_tensor_new(&sa), *b = rt_tensor_new(&sb);
  rt_fill_random(a, rt_hash_name(what), "a", 7);
  rt_fill_random(b, rt_hash_name(what), "b", 7);
  rt_tensor *got = run_mm_transposed(a, b, tra, trb, false, checked);
  rt_tensor *want = run_mm_transposed(a, b, tra, trb, true, checked);
  bool same = false;
  CHECK(got && want);
  if (got && want) {
    CHECK(ir_type_equal(&got->type, &want->type));
    same = got->nbytes == want->nbytes && memcmp(got->data, want->data, got->nbytes) == 0;
    int64_t n = ir_type_numel(&want->type);
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = rt_tensor_get(want, i);
    if (tol == 0) CHECK(same);
    compare(what, got, w, tol);
    free(w);
    printf("%-72s %s\n", what, same ? "bit-identical to explicit transposes" : "differs in the last bits");
  }
  rt_tensor_free(a), rt_tensor_free(b), rt_tensor_free(got), rt_tensor_free(want);
  return same;
}

/* a [.., M, K] (stored [.., K, M] when tra) and b [.., K, N] (stored
 * [.., N, K] when trb), batch dims as given (rank 2 + nb). */
static ir_type mm_operand(ir_dtype dt, int nb, const int64_t *batch, int64_t rows, int64_t cols, bool tr) {
  ir_type t = {.dtype = dt, .rank = nb + 2};
  for (int d = 0; d < nb; d++) t.dims[d] = batch[d];
  t.dims[nb] = tr ? cols : rows, t.dims[nb + 1] = tr ? rows : cols;
  return t;
}

static void test_matmul_transposed(void) {
  static const int64_t b21[] = {2, 1}, b3[] = {3}, b2[] = {2};
  /* big = 0: small products (edges of the micro-tiles everywhere);
   * big = 1: 2.6M multiply-adds per matrix, several threads */
  for (int big = 0; big < 2; big++)
    for (int t = 1; t < 4; t++) {
      bool tra = t & 1, trb = t & 2;
      int64_t M = big ? 64 : 24, K = big ? 160 : 33, N = big ? 256 : 20;
      ir_dtype dts[2] = {IR_DT_F64, IR_DT_F32};
      for (int f = 0; f < 2; f++) {
        double tol = 0; /* gemm.c: the same chain per element, read transposed or not */
        /* 2-D */
        check_matmul_transposed(mm_operand(dts[f], 0, NULL, M, K, tra), mm_operand(dts[f], 0, NULL, K, N, trb), tra, trb,
                                tol, true);
        /* batched with broadcast: a [2, 1, M, K] @ b [3, K, N] */
        check_matmul_transposed(mm_operand(dts[f], 2, b21, M, K, tra), mm_operand(dts[f], 1, b3, K, N, trb), tra, trb,
                                tol, true);
      }
      /* x @ W with W shared by every batch: f32 takes one product over all rows (b may be transposed) */
      check_matmul_transposed(mm_operand(IR_DT_F32, 1, b2, M, K, tra), mm_operand(IR_DT_F32, 0, NULL, K, N, trb), tra,
                              trb, 0, true);
      /* bf16: widened to f32 for sgemm */
      check_matmul_transposed(mm_operand(IR_DT_BF16, 0, NULL, M, K, tra), mm_operand(IR_DT_BF16, 1, b2, K, N, trb), tra,
                              trb, 0, true);
      /* the plain loop: integers (not a typed matmul; the kernel is reached all the same) */
      check_matmul_transposed(mm_operand(IR_DT_I32, 1, b2, M, K, tra), mm_operand(IR_DT_I32, 0, NULL, K, N, trb), tra,
                              trb, 0, false);
    }
}

/* ---- layout -------------------------------------------------------------------- */

static void test_layout(void) {
  tcase c;
  int64_t idx[IR_MAX_RANK], j[IR_MAX_RANK];
  /* transpose [2,3,4] perm [2,0,1] -> [4,2,3] */
  tc_begin(&c, "transpose");
  ir_type t = T(IR_DT_BF16, 3, D(2), D(3), D(4));
  tc_input(&c, t, 2, 1, 0);
  int64_t perm[] = {2, 0, 1};
  ir_attr a = ir_attr_ints("perm", perm, 3);
  if (tc_run(&c, IR_OP_TRANSPOSE, &a, 1, NULL) == 0) {
    double want[24];
    for (int64_t o = 0; o < 24; o++) {
      unravel(o, &c.out[0]->type, idx);
      for (int d = 0; d < 3; d++) j[perm[d]] = idx[d];
      want[o] = rt_tensor_get(c.tin[0], ravel(&t, j));
    }
    compare("transpose", c.out[0], want, 0);
  }
  tc_end(&c);

  /* reshape [2,3,4] -> [6,4] */
  tc_begin(&c, "reshape");
  tc_input(&c, T(IR_DT_I64, 3, D(2), D(3), D(4)), 100, 1, 0);
  int64_t shape[] = {6, 4};
  a = ir_attr_ints("shape", shape, 2);
  if (tc_run(&c, IR_OP_RESHAPE, &a, 1, NULL) == 0) {
    CHECK(memcmp(c.out[0]->data, c.tin[0]->data, 24 * 8) == 0);
    CHECK_EQ_INT(c.out[0]->type.dims[0], 6);
  }
  tc_end(&c);

  /* broadcast [3,1] -> [2,3,4] */
  tc_begin(&c, "broadcast");
  t = T(IR_DT_F32, 2, D(3), D(1));
  tc_input(&c, t, 2, 1, 0);
  int64_t bshape[] = {2, 3, 4};
  a = ir_attr_ints("shape", bshape, 3);
  if (tc_run(&c, IR_OP_BROADCAST, &a, 1, NULL) == 0) {
    double want[24];
    for (int64_t o = 0; o < 24; o++) {
      unravel(o, &c.out[0]->type, idx);
      want[o] = rt_tensor_get(c.tin[0], bcast_index(&t, 3, idx));
    }
    compare("broadcast", c.out[0], want, 0);
  }
  tc_end(&c);

  /* slice axis 1, 1:5:2 of [2,6,3] */
  tc_begin(&c, "slice");
  t = T(IR_DT_F64, 3, D(2), D(6), D(3));
  tc_input(&c, t, 2, 1, 0);
  ir_attr sa[] = {ir_attr_int("axis", 1), ir_attr_int("start", 1), ir_attr_int("end", 5), ir_attr_int("step", 2)};
  if (tc_run(&c, IR_OP_SLICE, sa, 4, NULL) == 0) {
    CHECK_EQ_INT(c.out[0]->type.dims[1], 2);
    double want[12];
    for (int64_t o = 0; o < 12; o++) {
      unravel(o, &c.out[0]->type, idx);
      idx[1] = 1 + 2 * idx[1];
      want[o] = rt_tensor_get(c.tin[0], ravel(&t, idx));
    }
    compare("slice", c.out[0], want, 0);
  }
  tc_end(&c);

  /* concat along axis 1: [2,1,3] [2,2,3] [2,3,3] -> [2,6,3] */
  tc_begin(&c, "concat");
  for (int i = 1; i <= 3; i++) tc_input(&c, T(IR_DT_I32, 3, D(2), D(i), D(3)), 50, 1, 0);
  a = ir_attr_int("axis", 1);
  if (tc_run(&c, IR_OP_CONCAT, &a, 1, NULL) == 0) {
    double want[36];
    for (int64_t o = 0; o < 36; o++) {
      unravel(o, &c.out[0]->type, idx);
      int which = idx[1] < 1 ? 0 : idx[1] < 3 ? 1 : 2;
      int64_t start = which == 0 ? 0 : which == 1 ? 1 : 3;
      idx[1] -= start;
      want[o] = rt_tensor_get(c.tin[which], ravel(&c.tin[which]->type, idx));
    }
    compare("concat", c.out[0], want, 0);
  }
  tc_end(&c);

  /* split [5,2] along axis 0 into 2 and 3 */
  tc_begin(&c, "split");
  t = T(IR_DT_F16, 2, D(5), D(2));
  tc_input(&c, t, 2, 1, 0);
  int64_t sizes[] = {2, 3};
  ir_attr spa[] = {ir_attr_int("axis", 0), ir_attr_ints("sizes", sizes, 2)};
  if (tc_run(&c, IR_OP_SPLIT, spa, 2, NULL) == 0) {
    CHECK_EQ_INT(c.node->n_out, 2);
    double w0[4], w1[6];
    for (int i = 0; i < 4; i++) w0[i] = rt_tensor_get(c.tin[0], i);
    for (int i = 0; i < 6; i++) w1[i] = rt_tensor_get(c.tin[0], 4 + i);
    compare("split 0", c.out[0], w0, 0);
    compare("split 1", c.out[1], w1, 0);
  }
  tc_end(&c);
}

/* ---- reductions and normalizations ------------------------------------------------ */

static void check_reduce(ir_op op, ir_dtype dt, const int64_t *axes, int n_axes, int keep, double tol) {
  tcase c;
  tc_begin(&c, ir_op_name(op));
  ir_type t = T(dt, 3, D(3), D(4), D(5));
  tc_input(&c, t, 2, 1, 0);
  ir_attr a[] = {ir_attr_ints("axes", axes, n_axes), ir_attr_int("keepdims", keep)};
  if (tc_run(&c, op, a, 2, NULL) == 0) {
    rt_tensor *out = c.out[0];
    CHECK_EQ_INT(out->type.rank, keep ? 3 : 3 - n_axes);
    double *want = alloc_want(out);
    int64_t nout = ir_type_numel(&out->type);
    int64_t count[64] = {0};
    bool red[3] = {0};
    for (int i = 0; i < n_axes; i++) red[axes[i]] = true;
    for (int64_t o = 0; o < nout; o++) want[o] = op == IR_OP_REDUCE_MAX ? -INFINITY : 0;
    int64_t idx[3];
    for (int64_t i = 0; i < 60; i++) {
      unravel(i, &t, idx);
      int64_t o = 0;
      for (int d = 0; d < 3; d++)
        if (!red[d]) o = o * t.dims[d] + idx[d];
      double x = rt_tensor_get(c.tin[0], i);
      if (op == IR_OP_REDUCE_MAX) want[o] = x > want[o] ? x : want[o];
      else want[o] += x;
      count[o]++;
    }
    for (int64_t o = 0; o < nout; o++) {
      if (op == IR_OP_REDUCE_MEAN) want[o] /= (double)count[o];
      want[o] = ir_round_to_dtype(dt, want[o]);
    }
    char what[64];
    snprintf(what, sizeof what, "%s %s n_axes %d keep %d", ir_op_name(op), ir_dtype_name(dt), n_axes, keep);
    compare(what, out, want, tol);
    free(want);
  }
  tc_end(&c);
}

static void test_reduce(void) {
  static const int64_t ax02[] = {0, 2}, ax1[] = {1}, ax012[] = {0, 1, 2};
  ir_op ops[] = {IR_OP_REDUCE_SUM, IR_OP_REDUCE_MEAN, IR_OP_REDUCE_MAX};
  for (int i = 0; i < 3; i++) {
    check_reduce(ops[i], IR_DT_F64, ax02, 2, 0, 1e-12);
    check_reduce(ops[i], IR_DT_F64, ax02, 2, 1, 1e-12);
    check_reduce(ops[i], IR_DT_F64, ax1, 1, 0, 1e-12);
    check_reduce(ops[i], IR_DT_F64, ax012, 3, 0, 1e-12);
    check_reduce(ops[i], IR_DT_F64, ax012, 0, 0, 0); /* no axes: identity */
    check_reduce(ops[i], IR_DT_F32, ax1, 1, 1, 1e-5);
    /* bf16 (the bias gradients of a bf16 step): summed in double in order, rounded once, exactly as the
     * reference: leading (the fast path over a block of results), trailing (one result a row), general */
    static const int64_t ax01[] = {0, 1}, ax12[] = {1, 2};
    check_reduce(ops[i], IR_DT_BF16, ax01, 2, 0, 0);
    check_reduce(ops[i], IR_DT_BF16, ax12, 2, 1, 0);
    check_reduce(ops[i], IR_DT_BF16, ax02, 2, 0, 0);
    check_reduce(ops[i], IR_DT_BF16, ax012, 3, 0, 0);
  }
}

/* argmax against the first-maximum loop, every axis, f32 (on floats) and
 * f64; ties and NaNs planted. count_nonfinite against a count. Exact. */
static void test_argmax_nonfinite(void) {
  for (int f = 0; f < 2; f++)
    for (int axis = 0; axis < 3; axis++) {
      tcase c;
      tc_begin(&c, "argmax");
      ir_type t = {.dtype = f ? IR_DT_F32 : IR_DT_F64, .rank = 3, .dims = {3, 5, 4}};
      tc_input(&c, t, 0, 1, 0);
      rt_tensor *x = c.tin[0];
      rt_tensor_set(x, 7, rt_tensor_get(x, 3)); /* a tie */
      rt_tensor_set(x, 11, NAN);
      rt_tensor_set(x, 0, NAN);
      ir_attr a = ir_attr_int("axis", axis);
      if (tc_run(&c, IR_OP_ARGMAX, &a, 1, NULL) == 0) {
        int64_t n = t.dims[axis], inner = 1, outer = 1;
        for (int d = axis + 1; d < 3; d++) inner *= t.dims[d];
        for (int d = 0; d < axis; d++) outer *= t.dims[d];
        double want[60];
        for (int64_t r = 0; r < outer * inner; r++) {
          int64_t base = r / inner * n * inner + r % inner, best = 0;
          for (int64_t v = 1; v < n; v++)
            if (rt_tensor_get(x, base + v * inner) > rt_tensor_get(x, base + best * inner)) best = v;
          want[r] = (double)best;
        }
        compare("argmax", c.out[0], want, 0);
      }
      tc_end(&c);
    }
  tcase c;
  tc_begin(&c, "count_nonfinite");
  ir_type t = {.dtype = IR_DT_F32, .rank = 2, .dims = {70, 100}};
  tc_input(&c, t, 0, 1, 0);
  rt_tensor_set(c.tin[0], 5, NAN), rt_tensor_set(c.tin[0], 6000, INFINITY), rt_tensor_set(c.tin[0], 6999, -INFINITY);
  if (tc_run(&c, IR_OP_COUNT_NONFINITE, NULL, 0, NULL) == 0) {
    double want = 3;
    compare("count_nonfinite", c.out[0], &want, 0);
  }
  tc_end(&c);
  /* several tensors (fuse-elementwise's multi-tensor form): the counts of all */
  tc_begin(&c, "count_nonfinite of several tensors");
  tc_input(&c, t, 0, 1, 0);
  tc_input(&c, (ir_type){.dtype = IR_DT_BF16, .rank = 1, .dims = {9}}, 0, 1, 0);
  tc_input(&c, (ir_type){.dtype = IR_DT_F64, .rank = 0}, 0, 1, 0);
  rt_tensor_set(c.tin[0], 17, NAN), rt_tensor_set(c.tin[1], 8, -INFINITY), rt_tensor_set(c.tin[2], 0, INFINITY);
  if (tc_run(&c, IR_OP_COUNT_NONFINITE, NULL, 0, NULL) == 0) {
    double want = 3;
    compare("count_nonfinite of several tensors", c.out[0], &want, 0);
  }
  tc_end(&c);
}

/* count_nonfinite's vector loops (vec_math.c: 16 lanes in blocks of 2^15
 * elements, one contiguous range per thread) against isfinite element by
 * element: every float dtype, a length that is no multiple of 16 and spans
 * several blocks and threads, Inf, -Inf and NaN of either sign planted at
 * the lanes', blocks' and halves' edges. Exact. */
static void test_count_nonfinite_long(void) {
  static const ir_dtype dts[] = {IR_DT_F32, IR_DT_F64, IR_DT_BF16, IR_DT_F16};
  const int64_t n = 3 * 32768 + 4103;
  const int64_t at[] = {0, 1, 15, 16, 17, 32767, 32768, 32769, n / 2 - 1, n / 2, 65535, 65536, n - 17, n - 2, n - 1};
  const double special[] = {NAN, INFINITY, -INFINITY, -NAN};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    tcase c;
    tc_begin(&c, "count_nonfinite long");
    tc_input(&c, (ir_type){.dtype = dts[d], .rank = 1, .dims = {n}}, 0, 1e3, 0);
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
      if (i % 5 != 3) rt_tensor_set(c.tin[0], at[i], special[i % 4]); /* a few edges stay finite */
    rt_tensor_set(c.tin[0], 1000, 1e300); /* f32 and narrower: overflows to Inf as stored */
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += !isfinite(rt_tensor_get(c.tin[0], i));
    CHECK(want >= 11);
    if (tc_run(&c, IR_OP_COUNT_NONFINITE, NULL, 0, NULL) == 0) compare(ir_dtype_name(dts[d]), c.out[0], &want, 0);
    tc_end(&c);
  }
}

/* The count folded into its producer (pass_fold_counts, kern_fused.c): a
 * count_nonfinite over two results of one fused node (f32, and bf16 that
 * overflows only as stored), over a fused node that is one conversion (the
 * fast cast pass, which must count too) and over an input it must still
 * read. The pass gives the two fused nodes {nonfinite} and an i64[] result
 * each, the count reading those and the input; the count run, before the
 * pass and after it, equals the elements of the results, computed here
 * from the definitions, and of the input that are Inf or NaN. Rows longer
 * than a chunk, split between threads. */
static void test_count_folded(void) {
  const int64_t R = 9, C = 1300;
  tcase c;
  tc_begin(&c, "count folded");
  ir_value *ops[2] = {tc_input(&c, T(IR_DT_F32, 2, D(R), D(C)), 0, 1, 0), tc_input(&c, T(IR_DT_F32, 2, D(R), D(C)), 0, 1, 0)};
  tc_input(&c, T(IR_DT_F32, 2, D(R), D(C)), 0, 1, 0);
  rt_tensor *x = c.tin[0], *y = c.tin[1], *z = c.tin[2];
  rt_tensor_set(x, 3, NAN), rt_tensor_set(x, 2 * C + 700, INFINITY), rt_tensor_set(x, 5 * C + 1299, -INFINITY);
  for (int64_t r = 0; r < R; r++) {
    rt_tensor_set(y, r * C + 10, 1.5f); /* x y overflows f32 (row 4) */
    rt_tensor_set(y, r * C + 20, 1);    /* x / y: finite f32, Inf as bf16 (row 6) */
    rt_tensor_set(y, r * C + 600, 0);   /* x / 0: Inf in every row */
  }
  rt_tensor_set(x, 4 * C + 10, 3e38), rt_tensor_set(x, 6 * C + 20, 3.4e38);
  rt_tensor_set(z, 7, NAN), rt_tensor_set(z, R * C - 1, INFINITY);
  char err[512];
  ir_attr ex = ir_attr_str("expr", "(mul $0 $1);(cast bf16 (div $0 $1))");
  ir_node *f = ir_graph_build(c.g, IR_OP_FUSED, ops, 2, &ex, 1, NULL, "r", NOLOC, err, sizeof err);
  CHECK(f != NULL);
  if (!f) {
    fprintf(stderr, "%s\n", err);
    tc_end(&c);
    return;
  }
  ir_attr cx = ir_attr_str("expr", "(cast bf16 $0)"); /* one conversion: kern_cast.c's pass unless counting */
  ir_node *fc = ir_graph_build(c.g, IR_OP_FUSED, ops, 1, &cx, 1, NULL, "h", NOLOC, err, sizeof err);
  CHECK(fc != NULL);
  if (!fc) {
    tc_end(&c);
    return;
  }
  ir_value *cin[4] = {f->out[0], f->out[1], c.in[2], fc->out[0]};
  ir_node *cn = ir_graph_build(c.g, IR_OP_COUNT_NONFINITE, cin, 4, NULL, 0, NULL, "bad", NOLOC, err, sizeof err);
  CHECK(cn != NULL);
  if (!cn) {
    tc_end(&c);
    return;
  }
  ir_graph_add_output(c.g, "bad", cn->out[0]);
  ir_graph_add_output(c.g, "r0", f->out[0]); /* a result that is also an output (the new parameters) */
  ir_diag *dg = ir_diag_new(stderr);
  CHECK_EQ_INT(ir_verify(c.g, dg), 0);
  ir_diag_free(dg);
  double want = 0;
  for (int64_t i = 0; i < R * C; i++) {
    double a = rt_tensor_get(x, i), b = rt_tensor_get(y, i);
    double r0 = ir_round_to_dtype(IR_DT_F32, a * b);
    double r1 = ir_round_to_dtype(IR_DT_BF16, ir_round_to_dtype(IR_DT_F32, a / b));
    want += !isfinite(r0) + !isfinite(r1) + !isfinite(rt_tensor_get(z, i));
    want += !isfinite(ir_round_to_dtype(IR_DT_BF16, a));
  }
  CHECK(want == R + 14); /* the planted ones */
  for (int folded = 0; folded < 2; folded++) {
    if (folded) {
      CHECK_EQ_INT(pass_fold_counts(c.g), 0);
      ir_graph_compact(c.g);
      dg = ir_diag_new(stderr);
      CHECK_EQ_INT(ir_verify(c.g, dg), 0);
      ir_diag_free(dg);
      const ir_node *count = c.g->outputs[0].value->def;
      CHECK_EQ_INT(count->n_in, 3); /* f's count, z, fc's count */
      int counts = 0;
      for (int j = 0; j < count->n_in; j++) {
        const ir_node *p = count->in[j]->def;
        if (count->in[j]->type.dtype != IR_DT_I64) continue;
        counts++;
        CHECK(p && p->op == IR_OP_FUSED && count->in[j] == p->out[p->n_out - 1]);
        const ir_attr *nf = p ? ir_node_attr(p, "nonfinite") : NULL;
        CHECK(nf && nf->kind == IR_ATTR_INTS && nf->n == (p->n_out == 3 ? 2 : 1));
      }
      CHECK_EQ_INT(counts, 2);
    }
    rt_stats st = {0};
    int rc = rt_run(&rt_cpu_backend, c.g, c.tin, NULL, c.out, &st, err, sizeof err);
    if (rc != 0) fprintf(stderr, "count folded: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) compare(folded ? "count folded" : "count read", c.out[0], &want, 0);
    if (!folded)
      for (int i = 0; i < c.g->n_outputs; i++) rt_tensor_free(c.out[i]), c.out[i] = NULL; /* the second run's */
  }
  tc_end(&c);
}

/* sum_squares of several tensors: each tensor's squares added in order from
 * 0 in double, the tensors' sums left to right, as reduce_sum(square(cast
 * f64 x)) and a chain of adds compute them (the rewrite it comes from must
 * not change a bit). Exact. */
static void test_sum_squares(void) {
  tcase c;
  tc_begin(&c, "sum_squares");
  ir_type ts[3] = {{.dtype = IR_DT_F32, .rank = 2, .dims = {70, 100}},
                   {.dtype = IR_DT_BF16, .rank = 1, .dims = {9}},
                   {.dtype = IR_DT_F64, .rank = 0}};
  for (int i = 0; i < 3; i++) tc_input(&c, ts[i], 0, 1, 0);
  if (tc_run(&c, IR_OP_SUM_SQUARES, NULL, 0, NULL) == 0) {
    double want = 0;
    for (int i = 0; i < 3; i++) {
      double s = 0;
      for (int64_t j = 0; j < ir_type_numel(&ts[i]); j++) s += rt_tensor_get(c.tin[i], j) * rt_tensor_get(c.tin[i], j);
      want = i == 0 ? s : want + s;
    }
    compare("sum_squares", c.out[0], &want, 0);
  }
  tc_end(&c);
}

static void test_softmax(void) {
  for (int lg = 0; lg < 2; lg++)
    for (int axis = 0; axis < 3; axis++)
      for (int f = 0; f < 2; f++) {
        ir_op op = lg ? IR_OP_LOG_SOFTMAX : IR_OP_SOFTMAX;
        ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
        tcase c;
        tc_begin(&c, ir_op_name(op));
        ir_type t = T(dt, 3, D(2), D(3), D(4));
        tc_input(&c, t, 2, 3, 0);
        ir_attr a = ir_attr_int("axis", axis);
        if (tc_run(&c, op, &a, 1, NULL) == 0) {
          double want[24];
          int64_t idx[3];
          for (int64_t o = 0; o < 24; o++) {
            unravel(o, &t, idx);
            double sum = 0, x = rt_tensor_get(c.tin[0], o);
            int64_t j[3] = {idx[0], idx[1], idx[2]};
            for (j[axis] = 0; j[axis] < t.dims[axis]; j[axis]++) sum += exp(rt_tensor_get(c.tin[0], ravel(&t, j)));
            want[o] = lg ? x - log(sum) : exp(x) / sum;
          }
          char what[64];
          snprintf(what, sizeof what, "%s %s axis %d", ir_op_name(op), ir_dtype_name(dt), axis);
          compare(what, c.out[0], want, f ? 1e-5 : 1e-12);
          /* rows sum to one */
        }
        tc_end(&c);
      }
}

static void test_norms(void) {
  for (int rms = 0; rms < 2; rms++)
    for (int f = 0; f < 2; f++) {
      ir_op op = rms ? IR_OP_RMSNORM : IR_OP_LAYERNORM;
      ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
      tcase c;
      tc_begin(&c, ir_op_name(op));
      int64_t Dm = 8;
      tc_input(&c, T(dt, 3, D(2), D(3), Dm), 2, 2, 0.5);
      tc_input(&c, T(dt, 1, Dm), 2, 1, 1);
      if (!rms) tc_input(&c, T(dt, 1, Dm), 2, 1, 0);
      ir_attr a = ir_attr_float("eps", 1e-5);
      if (tc_run(&c, op, &a, 1, NULL) == 0) {
        double want[48];
        for (int r = 0; r < 6; r++) {
          double mean = 0, var = 0, ms = 0;
          for (int j = 0; j < Dm; j++) mean += rt_tensor_get(c.tin[0], r * Dm + j) / (double)Dm;
          for (int j = 0; j < Dm; j++) {
            double x = rt_tensor_get(c.tin[0], r * Dm + j);
            var += (x - mean) * (x - mean) / (double)Dm;
            ms += x * x / (double)Dm;
          }
          for (int j = 0; j < Dm; j++) {
            double x = rt_tensor_get(c.tin[0], r * Dm + j), g = rt_tensor_get(c.tin[1], j);
            want[r * Dm + j] = rms ? x / sqrt(ms + 1e-5) * g
                                   : (x - mean) / sqrt(var + 1e-5) * g + rt_tensor_get(c.tin[2], j);
          }
        }
        char what[64];
        snprintf(what, sizeof what, "%s %s", ir_op_name(op), ir_dtype_name(dt));
        compare(what, c.out[0], want, f ? 1e-5 : 1e-12);
      }
      tc_end(&c);
    }
}

/* ---- model ops -------------------------------------------------------------------- */

/* ---- the norms' backward against the expansion it replaced ---- */

static ir_value *ex(ir_graph *g, ir_op op, ir_value *a, ir_value *b) {
  ir_value *in[2] = {a, b};
  return ir_graph_build1(g, op, in, b ? 2 : 1, NULL, 0, NULL, NOLOC);
}

/* Mean over the last axis, kept: [..., D] -> [..., 1]. */
static ir_value *ex_last_mean(ir_graph *g, ir_value *v) {
  ir_attr a[2] = {ir_attr_ints("axes", (int64_t[]){v->type.rank - 1}, 1), ir_attr_int("keepdims", 1)};
  return ir_graph_build1(g, IR_OP_REDUCE_MEAN, &v, 1, a, 2, NULL, NOLOC);
}

static ir_value *ex_rows_sum(ir_graph *g, ir_value *v) {
  ir_attr a[2] = {ir_attr_ints("axes", (int64_t[]){0}, 1), ir_attr_int("keepdims", 0)};
  return ir_graph_build1(g, IR_OP_REDUCE_SUM, &v, 1, a, 2, NULL, NOLOC);
}

/* layernorm_grad / rmsnorm_grad (x[R, D], gamma, dy) against the primitive
 * ops passes/vjp.c expanded the norms' backward into before (in the
 * operands' dtype, every intermediate rounded): R = 7 and D = 37 (no block
 * or vector size divides them), and R = 300, D = 96. Tolerances relative to
 * max(1, |want|): f64 1e-12, f32 1e-5 (the expansion rounds each of its
 * ~14 intermediates to f32; the fused op rounds once). */
static void test_norm_grads(void) {
  static const int64_t shapes[2][2] = {{7, 37}, {300, 96}};
  for (int rms = 0; rms < 2; rms++)
    for (int f = 0; f < 2; f++)
      for (int sh = 0; sh < 2; sh++) {
        ir_op op = rms ? IR_OP_RMSNORM_GRAD : IR_OP_LAYERNORM_GRAD;
        ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
        int64_t R = shapes[sh][0], Dm = shapes[sh][1];
        tcase c;
        tc_begin(&c, ir_op_name(op));
        ir_type xt = T(dt, 2, D(R), D(Dm)), gt = T(dt, 1, D(Dm));
        tc_input(&c, xt, 2, 2, 0.5);
        tc_input(&c, gt, 2, 1, 1);
        tc_input(&c, xt, 2, 1, 0);
        ir_attr eps = ir_attr_float("eps", 1e-5);
        if (tc_run(&c, op, &eps, 1, NULL) == 0) {
          ir_graph *g = ir_graph_new("expansion", "kern.tg");
          ir_value *x = ir_graph_add_input(g, "x", xt, NOLOC), *gamma = ir_graph_add_input(g, "gamma", gt, NOLOC);
          ir_value *dy = ir_graph_add_input(g, "dy", xt, NOLOC);
          ir_type st = T(dt, 0);
          char err[256];
          ir_attr v = ir_attr_float("value", 1e-5);
          ir_value *k = ir_graph_build(g, IR_OP_CONST, NULL, 0, &v, 1, &st, "eps", NOLOC, err, sizeof err)->out[0];
          ir_value *xc = rms ? x : ex(g, IR_OP_SUB, x, ex_last_mean(g, x));
          ir_value *var = ex_last_mean(g, ex(g, IR_OP_SQUARE, xc, NULL));
          ir_value *rstd = ex(g, IR_OP_RSQRT, ex(g, IR_OP_ADD, var, k), NULL), *xhat = ex(g, IR_OP_MUL, xc, rstd);
          ir_value *gh = ex(g, IR_OP_MUL, dy, gamma);
          ir_value *t = ex(g, IR_OP_SUB, gh, ex(g, IR_OP_MUL, xhat, ex_last_mean(g, ex(g, IR_OP_MUL, gh, xhat))));
          if (!rms) t = ex(g, IR_OP_SUB, t, ex_last_mean(g, gh));
          ir_graph_add_output(g, "dx", ex(g, IR_OP_MUL, rstd, t));
          ir_graph_add_output(g, "dgamma", ex_rows_sum(g, ex(g, IR_OP_MUL, dy, xhat)));
          if (!rms) ir_graph_add_output(g, "dbeta", ex_rows_sum(g, dy));
          rt_tensor *want[3] = {NULL, NULL, NULL};
          rt_stats rs = {0};
          int rc = rt_run(&rt_cpu_backend, g, c.tin, NULL, want, &rs, err, sizeof err);
          CHECK_EQ_INT(rc, 0);
          for (int o = 0; rc == 0 && o < (rms ? 2 : 3); o++) {
            double *w = alloc_want(want[o]);
            for (int64_t i = 0; i < ir_type_numel(&want[o]->type); i++) w[i] = rt_tensor_get(want[o], i);
            char what[96];
            snprintf(what, sizeof what, "%s %s [%lld, %lld] result %d", ir_op_name(op), ir_dtype_name(dt), (long long)R,
                     (long long)Dm, o);
            compare(what, c.out[o], w, f ? 1e-5 : 1e-12);
            free(w);
          }
          for (int o = 0; o < 3; o++) rt_tensor_free(want[o]);
          ir_graph_free(g);
        }
        tc_end(&c);
      }
}

/* layernorm_grad / rmsnorm_grad in f32 (kern_reduce.c's f32 rows, several
 * rows' sums interleaved) against the formulas of its comment computed here
 * one row and one column at a time, in double, each sum in order: exact.
 * Row counts below, at and past the interleave and not a multiple of it.
 * The same in bf16 (widened, then the f32 rows), each result rounded to
 * bf16 once from the double. */
static void test_norm_grads_f32_exact(void) {
  static const int64_t shapes[][2] = {{7, 37}, {8, 5}, {300, 96}, {19, 768}};
  for (int bf = 0; bf < 2; bf++)
  for (int rms = 0; rms < 2; rms++)
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
      ir_op op = rms ? IR_OP_RMSNORM_GRAD : IR_OP_LAYERNORM_GRAD;
      int64_t R = shapes[sh][0], Dm = shapes[sh][1];
      ir_dtype xt = bf ? IR_DT_BF16 : IR_DT_F32;
      tcase c;
      tc_begin(&c, bf ? "norm_grad bf16 exact" : "norm_grad f32 exact");
      tc_input(&c, T(xt, 2, D(R), D(Dm)), 2, 2, 0.5);
      tc_input(&c, T(xt, 1, D(Dm)), 2, 1, 1);
      tc_input(&c, T(xt, 2, D(R), D(Dm)), 2, 1, 0);
      ir_attr eps = ir_attr_float("eps", 1e-5);
      if (tc_run(&c, op, &eps, 1, NULL) == 0) {
        double *dx = calloc((size_t)(R * Dm), sizeof *dx), *dg = calloc((size_t)Dm, sizeof *dg);
        double *db = calloc((size_t)Dm, sizeof *db), *mu = calloc((size_t)R, sizeof *mu);
        double *rs = calloc((size_t)R, sizeof *rs);
        const rt_tensor *x = c.tin[0], *gm = c.tin[1], *dy = c.tin[2];
        for (int64_t r = 0; r < R; r++) {
          double mean = 0, var = 0, m1 = 0, m2 = 0;
          for (int64_t j = 0; j < Dm && !rms; j++) mean += rt_tensor_get(x, r * Dm + j);
          mean = rms ? 0 : mean / (double)Dm;
          for (int64_t j = 0; j < Dm; j++) {
            double d = rt_tensor_get(x, r * Dm + j) - mean;
            var += d * d;
          }
          double rstd = 1.0 / sqrt(var / (double)Dm + 1e-5);
          for (int64_t j = 0; j < Dm; j++) {
            double gh = rt_tensor_get(dy, r * Dm + j) * rt_tensor_get(gm, j);
            m1 += gh;
            m2 += gh * (rt_tensor_get(x, r * Dm + j) - mean) * rstd;
          }
          m1 = rms ? 0 : m1 / (double)Dm;
          m2 /= (double)Dm;
          for (int64_t j = 0; j < Dm; j++) {
            double gh = rt_tensor_get(dy, r * Dm + j) * rt_tensor_get(gm, j);
            double xhat = (rt_tensor_get(x, r * Dm + j) - mean) * rstd;
            dx[r * Dm + j] = ir_round_to_dtype(c.out[0]->type.dtype, (gh - xhat * m2 - m1) * rstd);
          }
          mu[r] = mean, rs[r] = rstd;
        }
        for (int64_t j = 0; j < Dm; j++)
          for (int64_t r = 0; r < R; r++) {
            double g = rt_tensor_get(dy, r * Dm + j);
            dg[j] += g * (rt_tensor_get(x, r * Dm + j) - mu[r]) * rs[r];
            db[j] += g;
          }
        for (int64_t j = 0; j < Dm; j++)
          dg[j] = ir_round_to_dtype(c.out[1]->type.dtype, dg[j]), db[j] = ir_round_to_dtype(c.out[1]->type.dtype, db[j]);
        compare("norm_grad dx", c.out[0], dx, 0);
        compare("norm_grad dgamma", c.out[1], dg, 0);
        if (!rms) compare("norm_grad dbeta", c.out[2], db, 0);
        free(dx), free(dg), free(db), free(mu), free(rs);
      }
      tc_end(&c);
    }
}

static void test_embedding(void) {
  tcase c;
  tc_begin(&c, "embedding");
  tc_input(&c, T(IR_DT_F32, 2, D(10), D(4)), 2, 1, 0);
  tc_input(&c, T(IR_DT_I32, 2, D(2), D(3)), 10, 1, 0);
  if (tc_run(&c, IR_OP_EMBEDDING, NULL, 0, NULL) == 0) {
    double want[24];
    for (int p = 0; p < 6; p++) {
      int64_t id = (int64_t)rt_tensor_get(c.tin[1], p);
      for (int j = 0; j < 4; j++) want[p * 4 + j] = rt_tensor_get(c.tin[0], id * 4 + j);
    }
    compare("embedding", c.out[0], want, 0);
  }
  tc_end(&c);
}

static void test_cross_entropy(void) {
  for (int f = 0; f < 2; f++) {
    ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
    tcase c;
    tc_begin(&c, "cross_entropy");
    tc_input(&c, T(dt, 3, D(2), D(3), D(5)), 2, 2, 0);
    tc_input(&c, T(f ? IR_DT_I32 : IR_DT_I64, 2, D(2), D(3)), 5, 1, 0);
    if (tc_run(&c, IR_OP_CROSS_ENTROPY, NULL, 0, NULL) == 0) {
      CHECK_EQ_INT(c.out[0]->type.rank, 0);
      double total = 0;
      for (int p = 0; p < 6; p++) {
        double sum = 0;
        for (int j = 0; j < 5; j++) sum += exp(rt_tensor_get(c.tin[0], p * 5 + j));
        total += log(sum) - rt_tensor_get(c.tin[0], p * 5 + (int64_t)rt_tensor_get(c.tin[1], p));
      }
      double want = total / 6;
      compare("cross_entropy", c.out[0], &want, f ? 1e-5 : 1e-12);
    }
    tc_end(&c);
  }
}

static void test_causal_mask(void) {
  tcase c;
  tc_begin(&c, "causal_mask");
  ir_type t = T(IR_DT_F32, 3, D(2), D(3), D(5)); /* T = 3, S = 5: offset 2 */
  tc_input(&c, t, 2, 1, 0);
  if (tc_run(&c, IR_OP_CAUSAL_MASK, NULL, 0, NULL) == 0) {
    double want[30];
    int64_t idx[3];
    for (int64_t o = 0; o < 30; o++) {
      unravel(o, &t, idx);
      want[o] = idx[2] > idx[1] + 2 ? -INFINITY : rt_tensor_get(c.tin[0], o);
    }
    compare("causal_mask", c.out[0], want, 0);
    CHECK(isinf(rt_tensor_get(c.out[0], 3)) && !isinf(rt_tensor_get(c.out[0], 2)));
  }
  tc_end(&c);
}

/* dropout, training form, on a shard: rows 2..5 of a [8, 6, 8] value (as
 * dp would give a rank), so the positions along dim 0 start at 2 and the
 * strides are the whole value's. Exact against ir/scalar.h's generator at
 * each element's global index; the mask keyed by seed, step, micro-batch
 * and stream (each change draws another); about p of the elements dropped.
 * keep[] gets the mask. */
static void run_dropout(uint64_t key, int64_t stream, double p, bool *keep) {
  tcase c;
  tc_begin(&c, "dropout");
  ir_type t = T(IR_DT_F32, 3, D(4), D(6), D(8));
  tc_input(&c, t, 0, 1, 0);
  tc_input(&c, T(IR_DT_I64, 0), 2, 1, 0);
  memcpy(c.tin[1]->data, &key, sizeof key);
  const int64_t dims[3] = {4, 6, 8}, first[3] = {2, 0, 0}, strides[3] = {48, 8, 1};
  for (int d = 0; d < 3; d++) {
    ir_type pt = T(IR_DT_I64, 3, D(d == 0 ? 4 : 1), D(d == 1 ? 6 : 1), D(d == 2 ? 8 : 1));
    tc_input(&c, pt, 2, 1, 0);
    for (int64_t e = 0; e < dims[d]; e++) rt_tensor_set(c.tin[2 + d], e, (double)(first[d] + e));
  }
  ir_attr at[3] = {ir_attr_float("p", p), ir_attr_int("stream", stream), ir_attr_ints("strides", strides, 3)};
  if (tc_run(&c, IR_OP_DROPOUT, at, 3, NULL) == 0) {
    double want[192], scale = ir_round_to_dtype(IR_DT_F32, 1.0 / (1.0 - p));
    uint64_t sk = ir_dropout_stream_key(key, (uint64_t)stream);
    int64_t idx[3];
    for (int64_t o = 0; o < 192; o++) {
      unravel(o, &t, idx);
      uint64_t g = (uint64_t)((idx[0] + 2) * 48 + idx[1] * 8 + idx[2]);
      keep[o] = ir_dropout_bits(sk, g) >= ir_dropout_threshold(p);
      want[o] = keep[o] ? ir_round_to_dtype(IR_DT_F32, rt_tensor_get(c.tin[0], o) * scale) : 0.0;
    }
    compare("dropout", c.out[0], want, 0);
  }
  tc_end(&c);
}

static int mask_differences(const bool *a, const bool *b) {
  int n = 0;
  for (int i = 0; i < 192; i++) n += a[i] != b[i];
  return n;
}

static void test_dropout(void) {
  static bool base[192], other[192];
  double p = 0.25;
  run_dropout(rt_dropout_key(7, 0, 0), 0, p, base);
  int dropped = 0;
  for (int i = 0; i < 192; i++) dropped += !base[i];
  printf("dropout p %.2f: %d of 192 dropped\n", p, dropped); /* 48 expected, sigma 6 */
  CHECK(dropped >= 24 && dropped <= 72);
  run_dropout(rt_dropout_key(7, 0, 0), 0, p, other); /* the same key: the same mask */
  CHECK_EQ_INT(mask_differences(base, other), 0);
  const struct {
    const char *what;
    uint64_t key;
    int64_t stream;
  } changes[] = {{"step", rt_dropout_key(7, 1, 0), 0}, {"seed", rt_dropout_key(8, 0, 0), 0},
                 {"micro-batch", rt_dropout_key(7, 0, 1), 0}, {"stream", rt_dropout_key(7, 0, 0), 1}};
  for (size_t k = 0; k < sizeof changes / sizeof changes[0]; k++) {
    run_dropout(changes[k].key, changes[k].stream, p, other);
    int n = mask_differences(base, other); /* independent masks differ in 2 p (1 - p) = 37.5% (72 of 192) */
    printf("  another %s: %d of 192 elements differ\n", changes[k].what, n);
    CHECK(n >= 36);
  }
}

/* causal_mask {fill = 0.0}: the form the backward pass uses. */
static void test_causal_mask_fill(void) {
  tcase c;
  tc_begin(&c, "causal_mask_fill");
  ir_type t = T(IR_DT_F64, 3, D(2), D(4), D(4));
  tc_input(&c, t, 2, 1, 0);
  ir_attr a = ir_attr_float("fill", 0.0);
  if (tc_run(&c, IR_OP_CAUSAL_MASK, &a, 1, NULL) == 0) {
    double want[32];
    int64_t idx[3];
    for (int64_t o = 0; o < 32; o++) {
      unravel(o, &t, idx);
      want[o] = idx[2] > idx[1] ? 0.0 : rt_tensor_get(c.tin[0], o);
    }
    compare("causal_mask fill", c.out[0], want, 0);
  }
  tc_end(&c);
}

/* ---- autodiff helper ops ------------------------------------------------------------ */

/* unslice is the adjoint of slice: zeros with the operand placed at start:end:step. */
static void test_unslice(void) {
  for (int axis = 0; axis < 3; axis++) {
    tcase c;
    tc_begin(&c, "unslice");
    ir_type t = T(IR_DT_F32, 3, D(2), D(3), D(4));
    int64_t size = 11, start = 1, step = 3, end = start + (t.dims[axis] - 1) * step + 1;
    tc_input(&c, t, 2, 1, 0);
    ir_attr a[5] = {ir_attr_int("axis", axis), ir_attr_int("start", start), ir_attr_int("end", end),
                    ir_attr_int("step", step), ir_attr_int("size", size)};
    if (tc_run(&c, IR_OP_UNSLICE, a, 5, NULL) == 0) {
      rt_tensor *out = c.out[0];
      CHECK_EQ_INT(out->type.dims[axis], size);
      double *want = alloc_want(out);
      int64_t idx[3];
      for (int64_t o = 0; o < 24; o++) {
        unravel(o, &t, idx);
        idx[axis] = start + idx[axis] * step;
        want[ravel(&out->type, idx)] = rt_tensor_get(c.tin[0], o);
      }
      compare("unslice", out, want, 0);
      free(want);
    }
    tc_end(&c);
  }
}

/* embedding_grad: table gradient by scatter-add, repeated ids accumulate. */
static void test_embedding_grad(void) {
  for (int f = 0; f < 2; f++) {
    ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
    tcase c;
    tc_begin(&c, "embedding_grad");
    tc_input(&c, T(IR_DT_I64, 2, D(3), D(5)), 4, 1, 0); /* 15 ids in [0, 4): repeats */
    tc_input(&c, T(dt, 3, D(3), D(5), D(3)), 2, 1, 0);
    ir_attr a = ir_attr_int("vocab", 6);
    if (tc_run(&c, IR_OP_EMBEDDING_GRAD, &a, 1, NULL) == 0) {
      CHECK_EQ_INT(c.out[0]->type.dims[0], 6);
      double want[18] = {0};
      for (int p = 0; p < 15; p++) {
        int64_t id = (int64_t)rt_tensor_get(c.tin[0], p);
        for (int j = 0; j < 3; j++) want[id * 3 + j] += rt_tensor_get(c.tin[1], p * 3 + j);
      }
      compare("embedding_grad", c.out[0], want, f ? 1e-6 : 1e-12);
    }
    tc_end(&c);
  }
  /* an id out of range is an error naming the ids value */
  tcase c;
  tc_begin(&c, "embedding_grad_bad");
  tc_input(&c, T(IR_DT_I32, 1, D(2)), 2, 1, 0);
  tc_input(&c, T(IR_DT_F64, 2, D(2), D(3)), 2, 1, 0);
  rt_tensor_set(c.tin[0], 1, 9);
  ir_attr a = ir_attr_int("vocab", 4);
  char err[512];
  c.node = ir_graph_build(c.g, IR_OP_EMBEDDING_GRAD, c.in, 2, &a, 1, NULL, "r", NOLOC, err, sizeof err);
  CHECK(c.node != NULL);
  if (c.node) {
    ir_graph_add_output(c.g, "r", c.node->out[0]);
    CHECK_EQ_INT(rt_run(&rt_cpu_backend, c.g, c.tin, NULL, c.out, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "id 9 out of range") != NULL);
  }
  tc_end(&c);
}

/* cross_entropy_grad: (softmax(logits) - onehot(targets)) * g / positions. */
static void test_cross_entropy_grad(void) {
  for (int f = 0; f < 2; f++) {
    ir_dtype dt = f ? IR_DT_F32 : IR_DT_F64;
    tcase c;
    tc_begin(&c, "cross_entropy_grad");
    tc_input(&c, T(dt, 3, D(2), D(3), D(5)), 2, 3, 0);
    tc_input(&c, T(IR_DT_I32, 2, D(2), D(3)), 5, 1, 0);
    tc_input(&c, T(dt, 0), 2, 1, 0);
    if (tc_run(&c, IR_OP_CROSS_ENTROPY_GRAD, NULL, 0, NULL) == 0) {
      double want[30], g = rt_tensor_get(c.tin[2], 0);
      for (int p = 0; p < 6; p++) {
        double sum = 0;
        for (int j = 0; j < 5; j++) sum += exp(rt_tensor_get(c.tin[0], p * 5 + j));
        int64_t t = (int64_t)rt_tensor_get(c.tin[1], p);
        for (int j = 0; j < 5; j++)
          want[p * 5 + j] = (exp(rt_tensor_get(c.tin[0], p * 5 + j)) / sum - (j == t)) * g / 6;
      }
      compare("cross_entropy_grad", c.out[0], want, f ? 1e-6 : 1e-12);
    }
    tc_end(&c);
  }
}

/* einsum: the reference sums over every assignment of all labels. */
static void check_einsum(const char *eq, int n_in, const ir_type *types, double tol) {
  tcase c;
  tc_begin(&c, "einsum");
  for (int i = 0; i < n_in; i++) tc_input(&c, types[i], 2, 1, 0);
  ir_attr a = ir_attr_str("eq", eq);
  if (tc_run(&c, IR_OP_EINSUM, &a, 1, NULL) == 0) {
    /* labels and sizes */
    char labels[16];
    int64_t size[16];
    int nl = 0;
    const char *s = eq;
    for (int op = 0; op < n_in; op++, s++)
      for (int d = 0; *s && *s != ',' && *s != '-'; s++, d++) {
        int l = 0;
        while (l < nl && labels[l] != *s) l++;
        if (l == nl) labels[nl] = *s, size[nl++] = types[op].dims[d];
      }
    const char *outl = strstr(eq, "->") + 2;
    rt_tensor *out = c.out[0];
    double *want = alloc_want(out);
    int64_t total = 1, val[16];
    for (int l = 0; l < nl; l++) total *= size[l];
    for (int64_t it = 0; it < total; it++) {
      int64_t r = it;
      for (int l = nl - 1; l >= 0; l--) val[l] = r % size[l], r /= size[l];
      double prod = 1;
      s = eq;
      for (int op = 0; op < n_in; op++, s++) {
        int64_t idx[IR_MAX_RANK];
        for (int d = 0; *s && *s != ',' && *s != '-'; s++, d++)
          for (int l = 0; l < nl; l++)
            if (labels[l] == *s) idx[d] = val[l];
        prod *= rt_tensor_get(c.tin[op], ravel(&types[op], idx));
      }
      int64_t oidx[IR_MAX_RANK];
      for (int d = 0; outl[d]; d++)
        for (int l = 0; l < nl; l++)
          if (labels[l] == outl[d]) oidx[d] = val[l];
      want[ravel(&out->type, oidx)] += prod;
    }
    char what[64];
    snprintf(what, sizeof what, "einsum %s", eq);
    compare(what, out, want, tol);
    free(want);
  }
  tc_end(&c);
}

static void test_einsum(void) {
  ir_type mm[] = {T(IR_DT_F64, 2, D(3), D(4)), T(IR_DT_F64, 2, D(4), D(5))};
  check_einsum("ij,jk->ik", 2, mm, 1e-12);
  check_einsum("ij,jk->ki", 2, mm, 1e-12);
  ir_type bmm[] = {T(IR_DT_F32, 3, D(2), D(3), D(4)), T(IR_DT_F32, 3, D(2), D(4), D(5))};
  check_einsum("bij,bjk->bik", 2, bmm, 1e-5);
  ir_type sq[] = {T(IR_DT_F64, 2, D(4), D(4))};
  check_einsum("ii->i", 1, sq, 1e-12);
  check_einsum("ij->", 1, sq, 1e-12);
  check_einsum("ij->ji", 1, sq, 0);
  ir_type vv[] = {T(IR_DT_F64, 1, D(6)), T(IR_DT_F64, 1, D(6))};
  check_einsum("i,i->", 2, vv, 1e-12);
  check_einsum("i,j->ij", 2, vv, 0);
  ir_type three[] = {T(IR_DT_F64, 2, D(2), D(3)), T(IR_DT_F64, 2, D(3), D(4)), T(IR_DT_F64, 2, D(4), D(2))};
  check_einsum("ij,jk,kl->il", 3, three, 1e-12);
  ir_type att[] = {T(IR_DT_F64, 4, D(2), D(3), D(2), D(4)), T(IR_DT_F64, 4, D(2), D(5), D(2), D(4))};
  check_einsum("bqhd,bkhd->bhqk", 2, att, 1e-12);
}

/* ---- fused attention (kern_attention.c) ------------------------------------
 * Reference in double, straight from the definition: s = scale q k^T masked
 * where j > i + (S - T) if causal, p = softmax(s), o = p v, lse = log sum
 * exp(s); a row that sees no key gives NaN and -inf. The backward from the
 * same p: dv = p^T do, ds = p (do v^T - rowsum(do o)), dq = scale ds k,
 * dk = scale ds^T q. Sizes cross the kernels' blocks (64 keys, 32 rows).
 * Tolerance (relative, floor 1): f64 1e-12, f32 1e-5, bf16 2e-2 (outputs
 * rounded to 8 significant bits). */
typedef struct {
  int64_t bh, t, s, e, f;
  double scale;
  bool causal;
  bool has_qpos; /* attention's 4th operand (a decode step over a KV cache): row i sees j <= i + qpos */
  int64_t qpos;
} att_case;

/* p[i * S + j] for batch element b from q, k (NaN rows where no key is visible). */
static void att_ref_probs(const att_case *a, const rt_tensor *q, const rt_tensor *k, int64_t b, double *p,
                          double *lse) {
  for (int64_t i = 0; i < a->t; i++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < a->s; j++) {
      double s = 0;
      for (int64_t e = 0; e < a->e; e++)
        s += rt_tensor_get(q, (b * a->t + i) * a->e + e) * rt_tensor_get(k, (b * a->s + j) * a->e + e);
      s *= a->scale;
      if (a->causal && j > i + (a->has_qpos ? a->qpos : a->s - a->t)) s = -INFINITY;
      p[i * a->s + j] = s;
      if (s > mx) mx = s;
    }
    for (int64_t j = 0; j < a->s; j++) sum += exp(p[i * a->s + j] - mx);
    for (int64_t j = 0; j < a->s; j++) p[i * a->s + j] = mx == -INFINITY ? NAN : exp(p[i * a->s + j] - mx) / sum;
    lse[i] = mx == -INFINITY ? -INFINITY : mx + log(sum);
  }
}

static void check_attention(ir_dtype dt, const att_case *a, double tol) {
  ir_type tq = T(dt, 3, D(a->bh), D(a->t), D(a->e)), tk = T(dt, 3, D(a->bh), D(a->s), D(a->e));
  ir_type tv = T(dt, 3, D(a->bh), D(a->s), D(a->f)), to = T(dt, 3, D(a->bh), D(a->t), D(a->f));
  ir_type tl = T(dt == IR_DT_F64 ? IR_DT_F64 : IR_DT_F32, 2, D(a->bh), D(a->t));
  ir_attr attrs[2] = {ir_attr_float("scale", a->scale), ir_attr_int("causal", a->causal)};
  char what[96];
  snprintf(what, sizeof what, "attention %s T%lld S%lld%s", ir_dtype_name(dt), (long long)a->t, (long long)a->s,
           a->causal ? " causal" : "");
  double *p = malloc((size_t)(a->t * a->s) * sizeof *p), *lse = malloc((size_t)a->t * sizeof *lse);
  /* forward */
  tcase c;
  tc_begin(&c, "attention");
  tc_input(&c, tq, 0, 1, 0);
  tc_input(&c, tk, 0, 1, 0);
  tc_input(&c, tv, 0, 1, 0);
  if (a->has_qpos) { /* the position; the cache's keys after the last visible one are NaN: never read */
    tc_input(&c, T(IR_DT_I32, 1, D(1)), 1, 1, 0);
    rt_tensor_set(c.tin[3], 0, (double)a->qpos);
    for (int64_t b = 0; b < a->bh; b++)
      for (int64_t j = a->qpos + a->t; j < a->s; j++)
        for (int64_t e = 0; e < a->e; e++) rt_tensor_set(c.tin[1], (b * a->s + j) * a->e + e, NAN);
  }
  if (tc_run(&c, IR_OP_ATTENTION, attrs, 2, NULL) == 0) {
    CHECK_EQ_INT(c.node->n_out, 2);
    double *wo = alloc_want(c.out[0]), *wl = alloc_want(c.out[1]);
    for (int64_t b = 0; b < a->bh; b++) {
      att_ref_probs(a, c.tin[0], c.tin[1], b, p, lse);
      for (int64_t i = 0; i < a->t; i++) {
        wl[b * a->t + i] = lse[i];
        for (int64_t f = 0; f < a->f; f++) {
          double acc = 0;
          for (int64_t j = 0; j < a->s; j++) acc += p[i * a->s + j] * rt_tensor_get(c.tin[2], (b * a->s + j) * a->f + f);
          wo[(b * a->t + i) * a->f + f] = acc;
        }
      }
    }
    snprintf(what + strlen(what), 8, " o");
    compare(what, c.out[0], wo, tol);
    what[strlen(what) - 2] = 0;
    compare(what, c.out[1], wl, tol);
    free(wo);
    free(wl);
  }
  tc_end(&c);
  if (a->has_qpos) { /* no backward (a decode step is not differentiated) */
    free(p), free(lse);
    return;
  }
  /* backward: o and lse consistent with q, k, v (from the reference) */
  tc_begin(&c, "attention_grad");
  tc_input(&c, tq, 0, 1, 0);
  tc_input(&c, tk, 0, 1, 0);
  tc_input(&c, tv, 0, 1, 0);
  tc_input(&c, to, 0, 1, 0);
  tc_input(&c, tl, 0, 1, 0);
  tc_input(&c, to, 0, 1, 0);
  double *pall = malloc((size_t)(a->bh * a->t * a->s) * sizeof *pall);
  for (int64_t b = 0; b < a->bh; b++) {
    att_ref_probs(a, c.tin[0], c.tin[1], b, pall + b * a->t * a->s, lse);
    for (int64_t i = 0; i < a->t; i++) {
      rt_tensor_set(c.tin[4], b * a->t + i, lse[i]);
      for (int64_t f = 0; f < a->f; f++) {
        double acc = 0;
        for (int64_t j = 0; j < a->s; j++)
          acc += pall[(b * a->t + i) * a->s + j] * rt_tensor_get(c.tin[2], (b * a->s + j) * a->f + f);
        rt_tensor_set(c.tin[3], (b * a->t + i) * a->f + f, acc);
      }
    }
  }
  if (tc_run(&c, IR_OP_ATTENTION_GRAD, attrs, 2, NULL) == 0) {
    CHECK_EQ_INT(c.node->n_out, 3);
    double *dq = alloc_want(c.out[0]), *dk = alloc_want(c.out[1]), *dv = alloc_want(c.out[2]);
    const rt_tensor *q = c.tin[0], *k = c.tin[1], *v = c.tin[2], *o = c.tin[3], *g = c.tin[5];
    for (int64_t b = 0; b < a->bh; b++)
      for (int64_t i = 0; i < a->t; i++) {
        double di = 0;
        for (int64_t f = 0; f < a->f; f++) di += rt_tensor_get(g, (b * a->t + i) * a->f + f) * rt_tensor_get(o, (b * a->t + i) * a->f + f);
        for (int64_t j = 0; j < a->s; j++) {
          double pij = pall[(b * a->t + i) * a->s + j];
          if (!(pij == pij) || (a->causal && j > i + (a->s - a->t))) continue; /* masked / no key */
          double dp = 0;
          for (int64_t f = 0; f < a->f; f++) {
            double gf = rt_tensor_get(g, (b * a->t + i) * a->f + f);
            dp += gf * rt_tensor_get(v, (b * a->s + j) * a->f + f);
            dv[(b * a->s + j) * a->f + f] += pij * gf;
          }
          double ds = a->scale * pij * (dp - di);
          for (int64_t e = 0; e < a->e; e++) {
            dq[(b * a->t + i) * a->e + e] += ds * rt_tensor_get(k, (b * a->s + j) * a->e + e);
            dk[(b * a->s + j) * a->e + e] += ds * rt_tensor_get(q, (b * a->t + i) * a->e + e);
          }
        }
      }
    const char *names[3] = {" dq", " dk", " dv"};
    double *wants[3] = {dq, dk, dv};
    size_t len = strlen(what);
    for (int r = 0; r < 3; r++) {
      snprintf(what + len, sizeof what - len, "%s", names[r]);
      compare(what, c.out[r], wants[r], tol);
      free(wants[r]);
    }
  }
  tc_end(&c);
  free(pall);
  free(p);
  free(lse);
}

/* Grouped-query backward: attention_grad on k, v of Hkv shared heads
 * (q, o, do of Hq) against the broadcast-copy formulation it replaces:
 * attention_grad on k, v repeated to Hq heads (kv head h / G for query head
 * h, G = Hq / Hkv), its dk, dv then summed over each group of G query heads
 * in double. Both graphs are attention + attention_grad on the same q, k,
 * v, do (so o and lse are consistent); dq must agree too. Tolerance
 * (relative, floor 1): f64 1e-12, f32 1e-5, bf16 2e-2 (the kernel sums a
 * group in f32 before rounding, the copy rounds each head's part). */
static int att_fwd_bwd(ir_dtype dt, const att_case *a, int64_t b, int64_t hq, int64_t hkv, rt_tensor **in,
                       rt_tensor **out) {
  ir_graph *g = ir_graph_new("gqa", "kern.tg");
  ir_type tq = T(dt, 4, D(b), D(hq), D(a->t), D(a->e)), tk = T(dt, 4, D(b), D(hkv), D(a->s), D(a->e));
  ir_type tv = T(dt, 4, D(b), D(hkv), D(a->s), D(a->f)), to = T(dt, 4, D(b), D(hq), D(a->t), D(a->f));
  ir_value *v[6] = {ir_graph_add_input(g, "q", tq, NOLOC), ir_graph_add_input(g, "k", tk, NOLOC),
                    ir_graph_add_input(g, "v", tv, NOLOC)};
  ir_value *dout = ir_graph_add_input(g, "do", to, NOLOC);
  ir_attr attrs[2] = {ir_attr_float("scale", a->scale), ir_attr_int("causal", a->causal)};
  char err[512];
  ir_node *fw = ir_graph_build(g, IR_OP_ATTENTION, v, 3, attrs, 2, NULL, "o", NOLOC, err, sizeof err);
  ir_node *bw = NULL;
  if (fw) {
    v[3] = fw->out[0], v[4] = fw->out[1], v[5] = dout;
    bw = ir_graph_build(g, IR_OP_ATTENTION_GRAD, v, 6, attrs, 2, NULL, "d", NOLOC, err, sizeof err);
  }
  if (!bw) fprintf(stderr, "gqa graph: %s\n", err);
  CHECK(bw != NULL);
  int rc = -1;
  if (bw) {
    for (int i = 0; i < 3; i++) ir_graph_add_output(g, bw->out[i]->name, bw->out[i]);
    ir_diag *d = ir_diag_new(stderr);
    CHECK_EQ_INT(ir_verify(g, d), 0);
    ir_diag_free(d);
    rt_stats st = {0};
    rc = rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err);
    if (rc != 0) fprintf(stderr, "gqa run: %s\n", err);
    CHECK_EQ_INT(rc, 0);
  }
  ir_graph_free(g);
  return rc;
}

static void check_attention_gqa(ir_dtype dt, const att_case *a, int64_t b, int64_t hq, int64_t hkv, double tol) {
  int64_t grp = hq / hkv;
  ir_type tq = T(dt, 4, D(b), D(hq), D(a->t), D(a->e)), tk = T(dt, 4, D(b), D(hkv), D(a->s), D(a->e));
  ir_type tv = T(dt, 4, D(b), D(hkv), D(a->s), D(a->f)), to = T(dt, 4, D(b), D(hq), D(a->t), D(a->f));
  ir_type tkr = tk, tvr = tv;
  tkr.dims[1] = tvr.dims[1] = hq;
  rt_tensor *gin[4] = {rt_tensor_new(&tq), rt_tensor_new(&tk), rt_tensor_new(&tv), rt_tensor_new(&to)};
  rt_tensor *rin[4] = {gin[0], rt_tensor_new(&tkr), rt_tensor_new(&tvr), gin[3]};
  static const char *const names[4] = {"q", "k", "v", "do"};
  for (int i = 0; i < 4; i++) rt_fill_random(gin[i], 977, names[i], 0);
  for (int i = 1; i < 3; i++) { /* the broadcast copy: query head h's row of kv head h / grp */
    int64_t per = ir_type_numel(&gin[i]->type) / (b * hkv);
    for (int64_t x = 0; x < b * hq; x++)
      for (int64_t e = 0; e < per; e++)
        rt_tensor_set(rin[i], x * per + e, rt_tensor_get(gin[i], ((x / hq) * hkv + (x % hq) / grp) * per + e));
  }
  rt_tensor *gout[3] = {NULL}, *rout[3] = {NULL};
  char what[128];
  snprintf(what, sizeof what, "attention_grad GQA %s B%lld Hq%lld Hkv%lld T%lld S%lld%s", ir_dtype_name(dt),
           (long long)b, (long long)hq, (long long)hkv, (long long)a->t, (long long)a->s, a->causal ? " causal" : "");
  if (att_fwd_bwd(dt, a, b, hq, hkv, gin, gout) == 0 && att_fwd_bwd(dt, a, b, hq, hq, rin, rout) == 0) {
    CHECK(ir_type_equal(&gout[1]->type, &tk) && ir_type_equal(&gout[2]->type, &tv));
    size_t len = strlen(what);
    for (int r = 0; r < 3; r++) {
      double *want = alloc_want(gout[r]);
      int64_t n = ir_type_numel(&gout[r]->type);
      if (r == 0) {
        for (int64_t i = 0; i < n; i++) want[i] = rt_tensor_get(rout[0], i);
      } else { /* sum the copy's per-query-head dk, dv over each group, in double */
        int64_t per = n / (b * hkv);
        for (int64_t x = 0; x < b * hq; x++)
          for (int64_t e = 0; e < per; e++)
            want[((x / hq) * hkv + (x % hq) / grp) * per + e] += rt_tensor_get(rout[r], x * per + e);
      }
      snprintf(what + len, sizeof what - len, " %s", r == 0 ? "dq" : r == 1 ? "dk" : "dv");
      compare(what, gout[r], want, tol);
      free(want);
    }
    what[len] = 0;
    printf("%s: = the broadcast copy within %g\n", what, tol);
  }
  for (int i = 0; i < 3; i++) rt_tensor_free(gout[i]), rt_tensor_free(rout[i]);
  for (int i = 0; i < 4; i++) rt_tensor_free(gin[i]);
  rt_tensor_free(rin[1]), rt_tensor_free(rin[2]);
}

static void test_attention(void) {
  static const att_case cases[] = {
      {2, 5, 7, 4, 3, 0.5, false, false, 0},     /* one block, T != S */
      {2, 37, 150, 5, 3, 0.3, false, false, 0},  /* three key blocks, two row blocks */
      {3, 70, 150, 4, 6, 0.4, true, false, 0},   /* causal, T < S: the diagonal shifted by S - T */
      {1, 150, 37, 3, 2, -0.7, true, false, 0},  /* causal, T > S: the first T - S rows see no key (NaN) */
      {1, 1, 1, 1, 1, 1.0, true, false, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check_attention(IR_DT_F64, &cases[i], 1e-12);
    check_attention(IR_DT_F32, &cases[i], 1e-5);
  }
  check_attention(IR_DT_BF16, &cases[2], 2e-2);
  check_attention(IR_DT_F16, &cases[1], 2e-2);
  /* with qpos: one query row (and three) over a cache of 150 rows, of which
   * the first qpos + i + 1 are visible; the rows after are never read */
  static const att_case cached[] = {
      {4, 1, 150, 8, 8, 0.35, true, true, 0},
      {4, 1, 150, 8, 8, 0.35, true, true, 70},
      {4, 1, 150, 8, 8, 0.35, true, true, 149},
      {2, 3, 150, 5, 4, 0.5, true, true, 100},
  };
  for (size_t i = 0; i < sizeof cached / sizeof cached[0]; i++) {
    check_attention(IR_DT_F64, &cached[i], 1e-12);
    check_attention(IR_DT_F32, &cached[i], 1e-5);
  }
  /* grouped-query backward: groups of 2, 3 and 4 query heads per kv head */
  static const att_case gqa[] = {
      {0, 37, 37, 8, 8, 0.35, true, false, 0},
      {0, 20, 150, 5, 3, 0.4, false, false, 0},
      {0, 70, 100, 4, 6, 0.5, true, false, 0},
  };
  check_attention_gqa(IR_DT_F64, &gqa[0], 2, 4, 2, 1e-12);
  check_attention_gqa(IR_DT_F32, &gqa[0], 2, 4, 2, 1e-5);
  check_attention_gqa(IR_DT_F64, &gqa[1], 1, 6, 2, 1e-12);
  check_attention_gqa(IR_DT_F32, &gqa[1], 1, 6, 2, 1e-5);
  check_attention_gqa(IR_DT_F64, &gqa[2], 2, 4, 1, 1e-12);
  check_attention_gqa(IR_DT_F32, &gqa[2], 2, 4, 1, 1e-5);
  check_attention_gqa(IR_DT_BF16, &gqa[0], 2, 4, 2, 2e-2);
}

/* ---- fused elementwise ops (kern_fused.c) -----------------------------------------
 * References in double from the definitions, rounding every intermediate to
 * its dtype with ir_round_to_dtype as the unfused kernels do: exact (tol 0).
 * Sizes cross the kernel's 512-element chunks and its row / broadcast paths. */

/* (sub (mul $0 (exp $1)) (cast f32 (sqrt $2))): x [R, C] f32, y [C] f32, z [R, 1] f64 */
static void check_fused_expr(int64_t R, int64_t C) {
  tcase c;
  tc_begin(&c, "fused");
  tc_input(&c, T(IR_DT_F32, 2, D(R), D(C)), 0, 1, 0);
  tc_input(&c, T(IR_DT_F32, 1, D(C)), 0, 0.5, 0);
  tc_input(&c, T(IR_DT_F64, 2, D(R), D(1)), 0, 1, 3);
  ir_attr ex = ir_attr_str("expr", "(sub (mul $0 (exp $1)) (cast f32 (sqrt $2)))");
  if (tc_run(&c, IR_OP_FUSED, &ex, 1, NULL) == 0) {
    double *want = alloc_want(c.out[0]);
    for (int64_t i = 0; i < R; i++)
      for (int64_t j = 0; j < C; j++) {
        double e = ir_round_to_dtype(IR_DT_F32, exp(rt_tensor_get(c.tin[1], j)));
        double m = ir_round_to_dtype(IR_DT_F32, rt_tensor_get(c.tin[0], i * C + j) * e);
        double q = ir_round_to_dtype(IR_DT_F32, sqrt(rt_tensor_get(c.tin[2], i)));
        want[i * C + j] = ir_round_to_dtype(IR_DT_F32, m - q);
      }
    compare("fused expr", c.out[0], want, 0);
    free(want);
  }
  tc_end(&c);
}

static void test_fused(void) {
  check_fused_expr(3, 5);
  check_fused_expr(7, 1300); /* rows longer than a chunk */
  check_fused_expr(1, 1);
  /* integer and bool dtypes: where(lt(a, b), a * 3, b) in i32 */
  tcase c;
  tc_begin(&c, "fused_int");
  tc_input(&c, T(IR_DT_I32, 1, D(50)), 100, 1, 0);
  tc_input(&c, T(IR_DT_I32, 1, D(50)), 100, 1, 0);
  ir_attr ex = ir_attr_str("expr", "(where (lt $0 $1) (mul $0 (const i32 3)) $1)");
  if (tc_run(&c, IR_OP_FUSED, &ex, 1, NULL) == 0) {
    double *want = alloc_want(c.out[0]);
    for (int i = 0; i < 50; i++) {
      double a = rt_tensor_get(c.tin[0], i), b = rt_tensor_get(c.tin[1], i);
      want[i] = a < b ? a * 3 : b;
    }
    compare("fused i32 where", c.out[0], want, 0);
    free(want);
  }
  tc_end(&c);
  /* fused_matmul: gelu(a @ b + bias), f32 [2, 3, 4] @ [4, 600] */
  tc_begin(&c, "fused_matmul");
  tc_input(&c, T(IR_DT_F32, 3, D(2), D(3), D(4)), 0, 1, 0);
  tc_input(&c, T(IR_DT_F32, 2, D(4), D(600)), 0, 1, 0);
  tc_input(&c, T(IR_DT_F32, 1, D(600)), 0, 1, 0);
  ex = ir_attr_str("expr", "(gelu (add $0 $1))");
  if (tc_run(&c, IR_OP_FUSED_MATMUL, &ex, 1, NULL) == 0) {
    double *want = alloc_want(c.out[0]);
    for (int64_t r = 0; r < 6; r++)
      for (int64_t j = 0; j < 600; j++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) acc += rt_tensor_get(c.tin[0], r * 4 + k) * rt_tensor_get(c.tin[1], k * 600 + j);
        double sum = ir_round_to_dtype(IR_DT_F32, ir_round_to_dtype(IR_DT_F32, acc) + rt_tensor_get(c.tin[2], j));
        want[r * 600 + j] = ir_round_to_dtype(IR_DT_F32, ir_eval_unary(IR_OP_GELU, sum));
      }
    compare("fused_matmul", c.out[0], want, 1e-5); /* the product: BLAS order, as matmul (f32 1e-5) */
    free(want);
  }
  tc_end(&c);
  /* add_layernorm: s = x + r exactly, y = layernorm(s) (1e-12 in f64) */
  ir_dtype dts[2] = {IR_DT_F64, IR_DT_F32};
  for (int t = 0; t < 2; t++) {
    tc_begin(&c, "add_layernorm");
    tc_input(&c, T(dts[t], 2, D(5), D(40)), 0, 1, 0);
    tc_input(&c, T(dts[t], 2, D(5), D(40)), 0, 1, 0);
    tc_input(&c, T(dts[t], 1, D(40)), 0, 1, 1);
    tc_input(&c, T(dts[t], 1, D(40)), 0, 1, 0);
    ir_attr eps = ir_attr_float("eps", 1e-5);
    if (tc_run(&c, IR_OP_ADD_LAYERNORM, &eps, 1, NULL) == 0) {
      double *ws = alloc_want(c.out[0]), *wy = alloc_want(c.out[1]);
      for (int r = 0; r < 5; r++) {
        double mean = 0, var = 0;
        for (int j = 0; j < 40; j++) {
          ws[r * 40 + j] =
              ir_round_to_dtype(dts[t], rt_tensor_get(c.tin[0], r * 40 + j) + rt_tensor_get(c.tin[1], r * 40 + j));
          mean += ws[r * 40 + j];
        }
        mean /= 40;
        for (int j = 0; j < 40; j++) var += (ws[r * 40 + j] - mean) * (ws[r * 40 + j] - mean);
        var /= 40;
        for (int j = 0; j < 40; j++)
          wy[r * 40 + j] = (ws[r * 40 + j] - mean) / sqrt(var + 1e-5) * rt_tensor_get(c.tin[2], j) +
                           rt_tensor_get(c.tin[3], j);
      }
      compare("add_layernorm s", c.out[0], ws, 0);
      compare("add_layernorm y", c.out[1], wy, t == 0 ? 1e-12 : 1e-5);
      free(ws);
      free(wy);
    }
    tc_end(&c);
  }
}

/* ---- the kernel table covers ops.def ------------------------------------------------ */

static void test_every_op_has_kernel(void) {
  static const struct {
    ir_op op;
    const char *name;
  } all[] = {
#define OP(id, name, nin, nout, kind, flags, flops, scalar) {IR_OP_##id, name},
#include "ops.def"
#undef OP
  };
  CHECK_EQ_INT(sizeof all / sizeof all[0], IR_NUM_OPS);
  CHECK_STR(rt_cpu_backend.name, "cpu");
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    ir_node n = {.op = all[i].op};
    if (all[i].op == IR_OP_GRAD) { /* a request, expanded by the autodiff pass: never executed */
      CHECK(!rt_cpu_backend.supports_op(&n));
      continue;
    }
    /* mesh steps (communication, mesh_slice) are the executor's, for every
     * backend (runtime/collective.c): test_autodiff runs them on one rank,
     * the mpirun tests across ranks */
    if (ir_op_has(all[i].op, IR_OPF_COMM) || all[i].op == IR_OP_MESH_SLICE) continue;
    if (!rt_cpu_backend.supports_op(&n)) fprintf(stderr, "  cpu backend: no kernel for op '%s'\n", all[i].name);
    CHECK(rt_cpu_backend.supports_op(&n));
  }
}

/* The vectorized helpers of vec_math.c against their scalar meaning. */
static void test_vec_math(void) {
  float x[37];
  for (int i = 0; i < 37; i++) x[i] = (float)((i * 7) % 37) - 18.5f;
  CHECK(rt_max_f32(x, 37) == 17.5f);
  CHECK(rt_max_f32(x, 0) == -INFINITY);
  x[30] = NAN;
  CHECK(isnan(rt_max_f32(x, 37)));
  CHECK(!isnan(rt_max_f32(x, 30)));
  float z[20];
  for (int i = 0; i < 20; i++) z[i] = i % 2 ? -0.0f : 0.0f;
  CHECK(rt_max_f32(z, 20) == 0.0f);
  for (int i = 0; i < 20; i++) z[i] = -INFINITY;
  CHECK(rt_max_f32(z, 20) == -INFINITY);
  /* bf16 rows (the LM head's logits in bf16): the max and the exponentials
   * are those of the values through rt_load, over more than one 512-block */
  enum { NB = 1300 };
  static uint16_t hb[NB];
  static double eb[NB];
  for (int i = 0; i < NB; i++) hb[i] = ir_f32_to_bf16((float)((i * 37) % 1301) / 97.0f - 6.0f);
  hb[700] = ir_f32_to_bf16(13.5f); /* the max, in the second block */
  CHECK(rt_max_bf16(hb, NB) == 13.5f);
  CHECK(rt_max_bf16(hb, 0) == -INFINITY);
  double mxb;
  rt_row_max(IR_DT_BF16, hb, 3, NB - 3, &mxb);
  CHECK(mxb == 13.5);
  rt_exp_shifted(IR_DT_BF16, hb, 3, NB - 3, 13.5, eb);
  int eb_bad = 0;
  for (int i = 0; i < NB - 3; i++) eb_bad += eb[i] != ir_exp_smooth(rt_load(IR_DT_BF16, hb, 3 + i) - 13.5);
  CHECK_EQ_INT(eb_bad, 0);
  hb[1299] = 0x7f81; /* a signalling NaN: the max is NaN, its exponential too */
  CHECK(isnan(rt_max_bf16(hb, NB)));
  rt_exp_shifted(IR_DT_BF16, hb, 1299, 1, 0.0, eb);
  CHECK(isnan(eb[0]));
  /* ir_round_f32 is ir_round_to_dtype(f32) at the edges */
  const double edges[] = {0.0, -0.0, 1.0 / 3, 3.4028234663852886e38, 3.4028235677973366e38, 3.4028235677973362e38,
                          -3.4028235677973366e38, 1e39, -1e300, INFINITY, -INFINITY, 1e-46, 7e-46};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    float a = ir_round_f32(edges[i]), b = (float)ir_round_to_dtype(IR_DT_F32, edges[i]);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
  }
  float nanr = ir_round_f32(NAN);
  CHECK(isnan(nanr));
  double e[40];
  float o[40];
  for (int i = 0; i < 40; i++) e[i] = exp(-0.3 * i);
  rt_softmax_scaled_f32(o, e, 2.5, 1.0 / 3, 40);
  int bad = 0;
  for (int i = 0; i < 40; i++) bad += o[i] != (float)(e[i] / 2.5 * (1.0 / 3));
  CHECK_EQ_INT(bad, 0);
  /* rt_sum_lanes: lane l sums e[l], e[l + 16], ... in order; then the lanes */
  for (int n = 0; n <= 40; n += 13) {
    double lane[16] = {0}, want = 0;
    for (int i = 0; i < n; i++) lane[i % 16] += e[i];
    for (int l = 0; l < 16; l++) want += lane[l];
    CHECK(rt_sum_lanes(e, n) == want);
  }
}

/* A thread's scratch is freed when the thread exits, and its stack (thread-
 * local storage, gone with the thread) leaves the list freed at exit: the
 * list once kept it, and exit then read unmapped memory (a segfault at the
 * end of test_cuda_examples on a GPU machine, where OpenMP's threads came
 * and went). */
static void *scratch_thread(void *arg) {
  size_t mark = rt_scratch_mark();
  char *p = rt_scratch_push(1 << 20);
  if (p) p[0] = p[(1 << 20) - 1] = 1;
  *(bool *)arg = p != NULL;
  rt_scratch_pop(mark);
  return NULL;
}

static void test_scratch_threads(void) {
  int before = rt_scratch_threads();
  pthread_t t[4];
  bool ok[4] = {false};
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, scratch_thread, &ok[i]) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) CHECK(ok[i]);
  CHECK_EQ_INT(rt_scratch_threads(), before);
}

static void test_bf16_inline(void) {
  static const uint32_t lows[] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000};
  uint64_t seed = 99;
  int bad = 0;
  for (uint32_t hi = 0; hi < 0x10000; hi++) {
    uint16_t h = (uint16_t)hi;
    float v = rt_bf16_value(h);
    if (memcmp(&v, &(float){ir_bf16_to_f32(h)}, 4) != 0) bad++;
    for (int l = 0; l < 10; l++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t b = hi << 16 | (l < 8 ? lows[l] : (uint32_t)(seed >> 48));
      float x;
      memcpy(&x, &b, 4);
      uint16_t got = rt_bf16_bits(x), want = ir_f32_to_bf16(x);
      double r = ir_round_to_dtype(IR_DT_BF16, x);
      bool nan = isnan(x);
      if (nan ? !(isnan(rt_bf16_value(got)) && got == want) : got != want || rt_bf16_value(got) != r ||
                                                                      !signbit(rt_bf16_value(got)) != !signbit(r))
        if (bad++ < 3) fprintf(stderr, "  bf16 of %a (0x%08x): 0x%04x, want 0x%04x (%a)\n", x, b, got, want, r);
    }
  }
  CHECK_EQ_INT(bad, 0);
  /* rt_round_bf16 (internal.h) on doubles: ties and near-ties of every
   * bf16 exponent, random significands, subnormal, overflow, Inf, NaN */
  bad = 0;
  for (int e = -140; e <= 130; e++)
    for (int l = 0; l < 200; l++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t sig = l < 4 ? (uint64_t[]){1ull << 44, (1ull << 44) - 1, (1ull << 44) + 1, 3ull << 44}[l] : seed >> 12;
      double x = ldexp(1.0 + (double)((seed >> 40 & 0x7F) << 45 | (sig & ((1ull << 45) - 1))) * 0x1p-52, e);
      for (int sgn = 0; sgn < 2; sgn++, x = -x) {
        double got = rt_round_bf16(x), want = ir_round_to_dtype(IR_DT_BF16, x);
        if (memcmp(&got, &want, 8) != 0 && bad++ < 3) fprintf(stderr, "  rt_round_bf16(%a) = %a, want %a\n", x, got, want);
      }
    }
  double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, DBL_MAX, 0x1.ffp127, 0x1.fep127, 0x1.fe8p127, 0x1p-126, 0x1p-127, 0x1.01p-126};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
    double got = rt_round_bf16(specials[i]), want = ir_round_to_dtype(IR_DT_BF16, specials[i]);
    if (!(isnan(got) && isnan(want)) && memcmp(&got, &want, 8) != 0 && bad++ < 6)
      fprintf(stderr, "  rt_round_bf16(%a) = %a, want %a\n", specials[i], got, want);
  }
  CHECK_EQ_INT(bad, 0);
}

int main(void) {
  test_scratch_threads();
  test_bf16_inline();
  test_every_op_has_kernel();
  test_vec_math();
  test_unary();
  test_cast();
  test_binary();
  test_where();
  test_const_iota();
  test_matmul();
  test_matmul_transposed();
  test_layout();
  test_reduce();
  test_softmax();
  test_argmax_nonfinite();
  test_count_nonfinite_long();
  test_count_folded();
  test_sum_squares();
  test_norms();
  test_norm_grads();
  test_norm_grads_f32_exact();
  test_embedding();
  test_cross_entropy();
  test_causal_mask();
  test_dropout();
  test_einsum();
  test_causal_mask_fill();
  test_unslice();
  test_embedding_grad();
  test_cross_entropy_grad();
  test_attention();
  test_fused();
  return check_done();
}
