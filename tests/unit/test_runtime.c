/* tests/unit/test_runtime.c — tensors, random numbers and the CPU executor
 * (runtime/tensor.c, random.c, cpu.c).
 *
 * Covers: overflow-checked tensor sizes, get/set rounding for every dtype,
 * FNV-1a and counter-based RNG values and determinism, parameter init
 * independent of declaration order, the executor's buffer accounting
 * (exact peak_bytes on a small chain, copies of outputs that are inputs or
 * listed twice), runtime errors with locations (embedding id and
 * cross_entropy target out of range, out of memory, wrong input type), and
 * bitwise determinism run to run and for 1 vs 2 OpenMP threads.
 * Tolerances: exact unless stated (RNG moments: 0.02 on 20000 samples).
 */
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "testgraph.h"
#include "runtime.h"


static ir_loc LOC(int line, int col) { return (ir_loc){.file = "model.tg", .line = line, .col = col}; }

static ir_value *node1(ir_graph *g, ir_op op, ir_value **in, int n_in, const ir_attr *attrs, int n_attrs,
                       const ir_type *out_type, const char *name, ir_loc loc) {
  char err[512];
  ir_node *n = ir_graph_build(g, op, in, n_in, attrs, n_attrs, out_type, name, loc, err, sizeof err);
  if (!n) fprintf(stderr, "build %s: %s\n", ir_op_name(op), err);
  CHECK(n != NULL);
  return n ? n->out[0] : NULL;
}

static int verify(const ir_graph *g) {
  ir_diag *d = ir_diag_new(stderr);
  int n = ir_verify(g, d);
  ir_diag_free(d);
  return n;
}

/* ---- tensors ----------------------------------------------------------------- */

static void test_tensors(void) {
  ir_type huge = T(IR_DT_F64, 2, D(1) << 30, D(1) << 30); /* 2^60 elements */
  CHECK(rt_tensor_new(&huge) == NULL);
  ir_type neg = T(IR_DT_F32, 1, D(-1));
  CHECK(rt_tensor_new(&neg) == NULL);
  ir_type tb = T(IR_DT_F64, 1, D(1) << 42); /* legal count, 32 TiB: refused, not attempted */
  CHECK(rt_tensor_new(&tb) == NULL);
  ir_type empty = T(IR_DT_F32, 2, D(0), D(3));
  rt_tensor *e = rt_tensor_new(&empty);
  CHECK(e && e->nbytes == 0);
  rt_tensor_fill(e, 1.0);
  rt_tensor_free(e);
  rt_tensor_free(NULL);

  ir_type s = T(IR_DT_F32, 0);
  for (int dt = 0; dt < IR_NUM_DTYPES; dt++) {
    s.dtype = (ir_dtype)dt;
    rt_tensor *t = rt_tensor_new(&s);
    CHECK(t && t->nbytes == ir_dtype_size((ir_dtype)dt));
    CHECK(rt_tensor_get(t, 0) == 0); /* zero-filled */
    double vals[] = {0.1, -2.5, 1e6, 3.7, -1e20};
    for (int i = 0; i < 5; i++) {
      rt_tensor_set(t, 0, vals[i]);
      CHECK(rt_tensor_get(t, 0) == ir_round_to_dtype((ir_dtype)dt, vals[i]));
    }
    rt_tensor_free(t);
  }
  /* bf16/f16 storage is the bit pattern of ir's conversion */
  ir_type hb = T(IR_DT_BF16, 1, D(3));
  rt_tensor *h = rt_tensor_new(&hb);
  rt_tensor_fill(h, 1.0 / 3.0);
  CHECK_EQ_INT(((uint16_t *)h->data)[2], ir_f32_to_bf16((float)ir_round_to_dtype(IR_DT_BF16, 1.0 / 3.0)));
  CHECK_EQ_INT(((uint16_t *)h->data)[2], 0x3eab);
  rt_tensor_free(h);
  ir_type hf = T(IR_DT_F16, 1, D(2));
  h = rt_tensor_new(&hf);
  rt_tensor_set(h, 1, 1.0);
  CHECK_EQ_INT(((uint16_t *)h->data)[1], 0x3c00);
  rt_tensor_set(h, 0, 1e6); /* overflows f16 */
  CHECK(isinf(rt_tensor_get(h, 0)));
  rt_tensor_free(h);
  ir_type ti = T(IR_DT_I32, 1, D(2));
  rt_tensor *it = rt_tensor_new(&ti);
  rt_tensor_set(it, 0, -2.9);
  rt_tensor_set(it, 1, 1e12); /* saturates */
  CHECK_EQ_INT(((int32_t *)it->data)[0], -2);
  CHECK_EQ_INT(((int32_t *)it->data)[1], INT32_MAX);
  rt_tensor_free(it);
}

/* ---- random numbers ---------------------------------------------------------------- */

static void test_random(void) {
  CHECK(rt_hash_name("") == UINT64_C(0xcbf29ce484222325));
  CHECK(rt_hash_name("a") == UINT64_C(0xaf63dc4c8601ec8c));
  CHECK(rt_hash_name("foobar") == UINT64_C(0x85944171f73967e8));
  CHECK(rt_random_uniform(1, 2, 3) == rt_random_uniform(1, 2, 3));
  CHECK(rt_random_uniform(1, 2, 3) != rt_random_uniform(1, 2, 4));
  CHECK(rt_random_uniform(1, 2, 3) != rt_random_uniform(1, 3, 3));
  CHECK(rt_random_uniform(1, 2, 3) != rt_random_uniform(2, 2, 3));
  /* Box–Muller pairs: normals 4 and 5 from the uniforms at 8 and 9, cosine then sine */
  double u1 = rt_random_uniform(7, 9, 8), u2 = rt_random_uniform(7, 9, 9);
  CHECK(rt_random_normal(7, 9, 4) == sqrt(-2 * log(1 - u1)) * cos(6.283185307179586476925 * u2));
  CHECK(rt_random_normal(7, 9, 5) == sqrt(-2 * log(1 - u1)) * sin(6.283185307179586476925 * u2));
  int n = 20000;
  double su = 0, sn = 0, sn2 = 0, lo = 1, hi = 0;
  for (int i = 0; i < n; i++) {
    double u = rt_random_uniform(42, 1, (uint64_t)i), z = rt_random_normal(42, 1, (uint64_t)i);
    su += u, sn += z, sn2 += z * z;
    lo = u < lo ? u : lo, hi = u > hi ? u : hi;
  }
  CHECK(lo >= 0 && hi < 1);
  CHECK_NEAR(su / n, 0.5, 0.02);
  CHECK_NEAR(sn / n, 0.0, 0.02);
  CHECK_NEAR(sn2 / n, 1.0, 0.03);

  /* fill_random: ints in [0, high), bools 0/1, independent per name */
  ir_type ti = T(IR_DT_I64, 1, D(1000));
  rt_tensor *a = rt_tensor_new(&ti), *b = rt_tensor_new(&ti);
  rt_fill_random(a, 5, "ids", 7);
  rt_fill_random(b, 5, "ids", 7);
  CHECK(memcmp(a->data, b->data, a->nbytes) == 0);
  int seen[7] = {0}, range_ok = 1;
  for (int i = 0; i < 1000; i++) {
    int64_t v = ((int64_t *)a->data)[i];
    if (v < 0 || v >= 7) range_ok = 0;
    else seen[v] = 1;
  }
  CHECK(range_ok);
  for (int i = 0; i < 7; i++) CHECK(seen[i]);
  rt_fill_random(b, 5, "other", 7);
  CHECK(memcmp(a->data, b->data, a->nbytes) != 0);
  rt_tensor_free(a);
  rt_tensor_free(b);

  /* a parameter's values depend on its name and the seed only, and do not
   * change with the thread count (fills are parallel above 4096 elements) */
  ir_graph *g1 = ir_graph_new("f", NULL), *g2 = ir_graph_new("f", NULL);
  ir_init init = {.kind = IR_INIT_NORMAL, .a = 0.02};
  ir_type tw = T(IR_DT_F32, 2, D(100), D(100));
  ir_value *p1 = ir_graph_add_param(g1, "l.0.W", tw, init, (ir_loc){0});
  ir_graph_add_param(g2, "emb", tw, init, (ir_loc){0});
  ir_value *p2 = ir_graph_add_param(g2, "l.0.W", tw, init, (ir_loc){0});
  rt_tensor *w1 = rt_tensor_new(&tw), *w2 = rt_tensor_new(&tw);
  omp_set_num_threads(1);
  rt_init_param(w1, p1, 3);
  omp_set_num_threads(2);
  rt_init_param(w2, p2, 3);
  CHECK(memcmp(w1->data, w2->data, w1->nbytes) == 0);
  CHECK(rt_tensor_get(w1, 17) == ir_round_to_dtype(IR_DT_F32, 0.02 * rt_random_normal(3, rt_hash_name("l.0.W"), 17)));
  ir_init uni = {.kind = IR_INIT_UNIFORM, .a = -1, .b = 3};
  ir_value *pu = ir_graph_add_param(g1, "u", tw, uni, (ir_loc){0});
  rt_init_param(w1, pu, 3);
  double mn = 1e9, mx = -1e9;
  for (int i = 0; i < 10000; i++) {
    double v = rt_tensor_get(w1, i);
    mn = v < mn ? v : mn, mx = v > mx ? v : mx;
  }
  CHECK(mn >= -1 && mx <= 3 && mn < -0.9 && mx > 2.9);
  ir_init ones = {.kind = IR_INIT_ONES};
  ir_value *po = ir_graph_add_param(g1, "o", tw, ones, (ir_loc){0});
  rt_init_param(w1, po, 3);
  CHECK(rt_tensor_get(w1, 9999) == 1.0);
  rt_tensor_free(w1);
  rt_tensor_free(w2);
  ir_graph_free(g1);
  ir_graph_free(g2);
}

/* ---- executor: buffers and peak bytes ------------------------------------------------ */

/* x f32[4,4] (input, bound: not allocated)
 *   a = exp(x)              64 B   arena block A, steps 0..2
 *   b = neg(a)              64 B   block B (an output: to the end)
 *   c = mul(a, b)           in a's block (a is read by nothing later)
 *   s = reduce_sum(c)        4 B   block S, live with A and B
 * outputs: s, b, x (the input itself), b again. Blocks are 256-byte aligned
 * and all three are live at step 3: arena = 3 x 256 = 768 bytes, the one
 * allocation (the input is bound, not copied), 4 kernels. */
static void test_peak_and_outputs(void) {
  ir_graph *g = ir_graph_new("chain", "model.tg");
  ir_type t = T(IR_DT_F32, 2, D(4), D(4));
  ir_value *x = ir_graph_add_input(g, "x", t, LOC(1, 1));
  ir_value *a = node1(g, IR_OP_EXP, &x, 1, NULL, 0, NULL, "a", LOC(2, 1));
  ir_value *b = node1(g, IR_OP_NEG, &a, 1, NULL, 0, NULL, "b", LOC(3, 1));
  ir_value *ab[] = {a, b};
  ir_value *c = node1(g, IR_OP_MUL, ab, 2, NULL, 0, NULL, "c", LOC(4, 1));
  int64_t axes[] = {0, 1};
  ir_attr ra = ir_attr_ints("axes", axes, 2);
  ir_value *s = node1(g, IR_OP_REDUCE_SUM, &c, 1, &ra, 1, NULL, "s", LOC(5, 1));
  ir_graph_add_output(g, "s", s);
  ir_graph_add_output(g, "b", b);
  ir_graph_add_output(g, "x", x);
  ir_graph_add_output(g, "b2", b);
  CHECK_EQ_INT(verify(g), 0);
  rt_tensor *tx = rt_tensor_new(&t);
  for (int i = 0; i < 16; i++) rt_tensor_set(tx, i, 0.1 * i - 0.5);
  rt_tensor *out[4];
  rt_stats st = {0};
  char err[256];
  int rc = rt_run(&rt_cpu_backend, g, &tx, NULL, out, &st, err, sizeof err);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    CHECK_EQ_INT(st.peak_bytes, 768);
    CHECK_EQ_INT(st.total_allocs, 1);
    CHECK_EQ_INT(st.kernels_run, 4);
    CHECK(out[2] != tx && memcmp(out[2]->data, tx->data, 64) == 0);
    CHECK(out[1] != out[3] && memcmp(out[1]->data, out[3]->data, 64) == 0);
    double sum = 0;
    for (int i = 0; i < 16; i++) {
      float ea = (float)exp((float)(0.1 * i - 0.5));
      sum += (double)(ea * -ea);
      CHECK(rt_tensor_get(out[1], i) == -ea);
    }
    CHECK_NEAR(rt_tensor_get(out[0], 0), sum, 1e-6);
    for (int i = 0; i < 4; i++) rt_tensor_free(out[i]);
  }
  rt_tensor_free(tx);
  ir_graph_free(g);
}

/* ---- executor: errors ------------------------------------------------------------------ */

static void test_errors(void) {
  char err[512];
  rt_tensor *out[2] = {0};
  rt_stats st = {0};

  /* embedding id out of range, after an intermediate was allocated */
  ir_graph *g = ir_graph_new("emb", "model.tg");
  ir_type tt = T(IR_DT_F32, 2, D(10), D(4)), ti = T(IR_DT_I32, 1, D(6));
  ir_value *table = ir_graph_add_input(g, "table", tt, LOC(1, 1));
  ir_value *ids = ir_graph_add_input(g, "ids", ti, LOC(1, 10));
  ir_value *tab2 = node1(g, IR_OP_EXP, &table, 1, NULL, 0, NULL, "t2", LOC(6, 3));
  ir_value *ei[] = {tab2, ids};
  ir_value *e = node1(g, IR_OP_EMBEDDING, ei, 2, NULL, 0, NULL, "e", LOC(7, 9));
  ir_graph_add_output(g, "e", e);
  ir_graph_add_output(g, "t2", tab2);
  CHECK_EQ_INT(verify(g), 0);
  rt_tensor *in[2] = {rt_tensor_new(&tt), rt_tensor_new(&ti)};
  for (int i = 0; i < 6; i++) rt_tensor_set(in[1], i, i == 4 ? 12 : i);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "model.tg:7:9: embedding id 12 out of range [0, 10) in %ids (element 4)");
  CHECK(out[0] == NULL && out[1] == NULL);
  rt_tensor_set(in[1], 4, -1);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "model.tg:7:9: embedding id -1 out of range [0, 10) in %ids (element 4)");
  rt_tensor_set(in[1], 4, 9);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), 0);
  rt_tensor_free(out[0]);
  rt_tensor_free(out[1]);
  /* wrong input type and missing input */
  rt_tensor *wrong = rt_tensor_new(&ti);
  rt_tensor *bad_in[2] = {wrong, in[1]};
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, bad_in, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "model.tg:1:1: input %table: expected f32[10, 4], got i32[6]");
  bad_in[0] = NULL;
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, bad_in, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "model.tg:1:1: no tensor given for input %table");
  rt_tensor_free(wrong);
  rt_tensor_free(in[0]);
  rt_tensor_free(in[1]);
  ir_graph_free(g);

  /* cross_entropy target out of range; no location known */
  g = ir_graph_new("ce", NULL);
  ir_type tl = T(IR_DT_F64, 2, D(3), D(5)), tg = T(IR_DT_I64, 1, D(3));
  ir_value *ce_in[] = {ir_graph_add_input(g, "logits", tl, (ir_loc){0}),
                       ir_graph_add_input(g, "targets", tg, (ir_loc){0})};
  ir_value *loss = node1(g, IR_OP_CROSS_ENTROPY, ce_in, 2, NULL, 0, NULL, "loss", (ir_loc){0});
  ir_graph_add_output(g, "loss", loss);
  in[0] = rt_tensor_new(&tl), in[1] = rt_tensor_new(&tg);
  rt_tensor_set(in[1], 2, 5);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "cross_entropy target 5 out of range [0, 5) in %targets (element 2)");
  rt_tensor_set(in[1], 2, 4);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), 0);
  CHECK_NEAR(rt_tensor_get(out[0], 0), log(5.0), 1e-12); /* all-zero logits */
  rt_tensor_free(out[0]);
  rt_tensor_free(in[0]);
  rt_tensor_free(in[1]);
  ir_graph_free(g);

  /* linear_cross_entropy (fuse-lm-head's op) checks its targets as cross_entropy does */
  g = ir_graph_new("lce", NULL);
  ir_type th = T(IR_DT_F64, 2, D(3), D(4)), tw = T(IR_DT_F64, 2, D(5), D(4)), tgt = T(IR_DT_I64, 1, D(3)), ts = T(IR_DT_F64, 0);
  ir_value *lce_in[] = {ir_graph_add_input(g, "h", th, (ir_loc){0}), ir_graph_add_input(g, "w", tw, (ir_loc){0}),
                        ir_graph_add_input(g, "targets", tgt, (ir_loc){0}), ir_graph_add_input(g, "g", ts, (ir_loc){0})};
  ir_attr lce_at[2] = {ir_attr_int("chunk", 2), ir_attr_int("transpose_b", 1)};
  loss = node1(g, IR_OP_LINEAR_CROSS_ENTROPY, lce_in, 4, lce_at, 2, NULL, "loss", (ir_loc){0});
  ir_graph_add_output(g, "loss", loss);
  rt_tensor *lin[4] = {rt_tensor_new(&th), rt_tensor_new(&tw), rt_tensor_new(&tgt), rt_tensor_new(&ts)};
  rt_tensor_set(lin[3], 0, 1);
  rt_tensor_set(lin[2], 2, 5);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, lin, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "linear_cross_entropy target 5 out of range [0, 5) in %targets (element 2)");
  rt_tensor_set(lin[2], 2, -1);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, lin, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "linear_cross_entropy target -1 out of range [0, 5) in %targets (element 2)");
  rt_tensor_set(lin[2], 2, 4);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, lin, NULL, out, &st, err, sizeof err), 0);
  CHECK_NEAR(rt_tensor_get(out[0], 0), log(5.0), 1e-12); /* all-zero h: all-zero logits */
  rt_tensor_free(out[0]);
  for (int i = 0; i < 4; i++) rt_tensor_free(lin[i]);
  ir_graph_free(g);

  /* out of memory: a 4 TiB constant is refused up front */
  g = ir_graph_new("big", "model.tg");
  ir_type tbig = T(IR_DT_F32, 1, D(1) << 40);
  ir_attr v = ir_attr_float("value", 1.0);
  ir_value *k = node1(g, IR_OP_CONST, NULL, 0, &v, 1, &tbig, "big", LOC(3, 5));
  int64_t axes[] = {0};
  ir_attr ra = ir_attr_ints("axes", axes, 1);
  ir_value *sum = node1(g, IR_OP_REDUCE_SUM, &k, 1, &ra, 1, NULL, "sum", LOC(4, 5));
  ir_graph_add_output(g, "sum", sum);
  CHECK_EQ_INT(verify(g), 0);
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, NULL, NULL, out, &st, err, sizeof err), -1);
  CHECK_STR(err, "model.tg:3:5: out of memory: the arena needs 4398046511360 bytes (its largest value, %big "
                "f32[1099511627776], 4398046511104 bytes)");
  ir_graph_free(g);
}

/* ---- determinism ---------------------------------------------------------------------- */

typedef struct {
  ir_graph *g;
  rt_tensor *in[2], *params[2];
} det_graph;

/* x[64,128] @ W[128,96] -> softmax -> layernorm(gamma, beta) -> rows summed;
 * plus cross_entropy of the logits and an einsum: sizes above the threading
 * threshold so the OpenMP loops really split. */
static void det_build(det_graph *d) {
  ir_graph *g = d->g = ir_graph_new("det", NULL);
  ir_loc L = {0};
  ir_type tx = T(IR_DT_F32, 2, D(64), D(128)), tw = T(IR_DT_F32, 2, D(128), D(96)), tv = T(IR_DT_F32, 1, D(96));
  ir_type tt = T(IR_DT_I32, 1, D(64));
  ir_value *x = ir_graph_add_input(g, "x", tx, L), *tg = ir_graph_add_input(g, "tg", tt, L);
  ir_init init = {.kind = IR_INIT_NORMAL, .a = 0.1};
  ir_value *w = ir_graph_add_param(g, "W", tw, init, L), *gamma = ir_graph_add_param(g, "gamma", tv, init, L);
  ir_value *xw[] = {x, w};
  ir_value *h = node1(g, IR_OP_MATMUL, xw, 2, NULL, 0, NULL, "h", L);
  ir_attr ax = ir_attr_int("axis", 1);
  ir_value *s = node1(g, IR_OP_SOFTMAX, &h, 1, &ax, 1, NULL, "s", L);
  ir_attr eps = ir_attr_float("eps", 1e-5);
  ir_value *rin[] = {s, gamma};
  ir_value *n = node1(g, IR_OP_RMSNORM, rin, 2, &eps, 1, NULL, "n", L);
  int64_t axes[] = {1};
  ir_attr ra = ir_attr_ints("axes", axes, 1);
  ir_value *r = node1(g, IR_OP_REDUCE_SUM, &n, 1, &ra, 1, NULL, "r", L);
  ir_value *ce_in[] = {h, tg};
  ir_value *ce = node1(g, IR_OP_CROSS_ENTROPY, ce_in, 2, NULL, 0, NULL, "ce", L);
  ir_attr eq = ir_attr_str("eq", "ij,kj->ik");
  ir_value *ein[] = {n, h};
  ir_value *gram = node1(g, IR_OP_EINSUM, ein, 2, &eq, 1, NULL, "gram", L);
  ir_graph_add_output(g, "r", r);
  ir_graph_add_output(g, "ce", ce);
  ir_graph_add_output(g, "gram", gram);
  CHECK_EQ_INT(verify(g), 0);
  d->in[0] = rt_tensor_new(&tx), d->in[1] = rt_tensor_new(&tt);
  rt_fill_random(d->in[0], 1, "x", 0);
  rt_fill_random(d->in[1], 1, "tg", 96);
  d->params[0] = rt_tensor_new(&tw), d->params[1] = rt_tensor_new(&tv);
  rt_init_param(d->params[0], w, 1);
  rt_init_param(d->params[1], gamma, 1);
}

static void test_determinism(void) {
  det_graph d;
  det_build(&d);
  rt_tensor *runs[4][3];
  int threads[4] = {0, 0, 1, 2};
  char err[256];
  int max = omp_get_max_threads();
  for (int r = 0; r < 4; r++) {
    omp_set_num_threads(threads[r] ? threads[r] : max);
    CHECK_EQ_INT(rt_run(&rt_cpu_backend, d.g, d.in, d.params, runs[r], NULL, err, sizeof err), 0);
  }
  omp_set_num_threads(max);
  for (int r = 1; r < 4; r++)
    for (int o = 0; o < 3; o++) CHECK(runs[r][o] && memcmp(runs[r][o]->data, runs[0][o]->data, runs[0][o]->nbytes) == 0);
  CHECK(isfinite(rt_tensor_get(runs[0][1], 0)));
  for (int r = 0; r < 4; r++)
    for (int o = 0; o < 3; o++) rt_tensor_free(runs[r][o]);
  for (int i = 0; i < 2; i++) rt_tensor_free(d.in[i]), rt_tensor_free(d.params[i]);
  ir_graph_free(d.g);
}

/* A concat of 70 operands (more than any fixed argument array would hold). */
static void test_wide_concat(void) {
  enum { N = 70 };
  ir_graph *g = ir_graph_new("wide", NULL);
  ir_type t = T(IR_DT_F64, 1, D(1));
  ir_value *vs[N];
  rt_tensor *ts[N];
  for (int i = 0; i < N; i++) {
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    vs[i] = ir_graph_add_input(g, name, t, (ir_loc){0});
    ts[i] = rt_tensor_new(&t);
    rt_tensor_set(ts[i], 0, i * 1.5);
  }
  ir_attr ax = ir_attr_int("axis", 0);
  ir_value *c = node1(g, IR_OP_CONCAT, vs, N, &ax, 1, NULL, "c", (ir_loc){0});
  ir_graph_add_output(g, "c", c);
  rt_tensor *out = NULL;
  char err[256];
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, ts, NULL, &out, NULL, err, sizeof err), 0);
  int bad = 0;
  for (int i = 0; out && i < N; i++) bad += rt_tensor_get(out, i) != i * 1.5;
  CHECK(out && bad == 0);
  rt_tensor_free(out);
  for (int i = 0; i < N; i++) rt_tensor_free(ts[i]);
  ir_graph_free(g);
}

/* In-place results, views and donation, as the plan decides and the
 * program runs them: a = x + p, b = exp(a), c = reshape(b).
 * Not donated: a in the arena, b in place of a, c a view of b (one block;
 * two kernels), x and p untouched. x donated: a is computed in x's buffer,
 * so the output lives there (no arena block at all); p (not donated) is
 * never written. The arena is allocated once: a second run allocates
 * nothing. */
static void test_inplace_and_donation(void) {
  ir_graph *g = ir_graph_new("inplace", "model.tg");
  ir_type t = T(IR_DT_F32, 1, D(6));
  ir_value *x = ir_graph_add_input(g, "x", t, LOC(1, 1));
  ir_value *p = ir_graph_add_param(g, "p", t, (ir_init){0}, LOC(2, 1));
  ir_value *xp[] = {x, p};
  ir_value *a = node1(g, IR_OP_ADD, xp, 2, NULL, 0, NULL, "a", LOC(3, 1));
  ir_value *b = node1(g, IR_OP_EXP, &a, 1, NULL, 0, NULL, "b", LOC(4, 1));
  int64_t shape[] = {2, 3};
  ir_attr sa = ir_attr_ints("shape", shape, 2);
  ir_value *c = node1(g, IR_OP_RESHAPE, &b, 1, &sa, 1, NULL, "c", LOC(5, 1));
  ir_graph_add_output(g, "c", c);
  CHECK_EQ_INT(verify(g), 0);
  char err[256];
  for (int donate = 0; donate < 2; donate++) {
    rt_device *dev = rt_device_open(&rt_cpu_backend, err, sizeof err);
    rt_tensor *tx = rt_tensor_new(&t), *tp = rt_tensor_new(&t);
    for (int i = 0; i < 6; i++) rt_tensor_set(tx, i, 0.25 * i - 1), rt_tensor_set(tp, i, 0.5);
    rt_buffer bx = rt_buffer_wrap(dev, tx->data, tx->nbytes), bp = rt_buffer_wrap(dev, tp->data, tp->nbytes);
    rt_tensor vx = rt_tensor_view(&bx, 0, &t), vp = rt_tensor_view(&bp, 0, &t);
    rt_tensor *ins[1] = {&vx}, *pars[1] = {&vp};
    bool dx = donate;
    rt_program_options po = {.donate_inputs = &dx};
    rt_program *prog = rt_program_new(dev, g, &po, err, sizeof err);
    CHECK(prog != NULL);
    if (!prog) continue;
    const pass_plan *plan = rt_program_plan(prog);
    CHECK_EQ_INT(plan->loc[b->id].reused_operand, 0);
    CHECK_EQ_INT(plan->loc[c->id].buffer, plan->loc[a->id].buffer);
    CHECK(plan->steps[2].view && !plan->steps[0].view);
    CHECK_EQ_INT(plan->loc[a->id].space, donate ? PASS_SPACE_INPUT : PASS_SPACE_ARENA);
    CHECK_EQ_INT(rt_program_arena_bytes(prog), donate ? 0 : 256);
    for (int run = 0; run < 2; run++) {
      if (donate && run == 1) /* x was consumed: refill it */
        for (int i = 0; i < 6; i++) rt_tensor_set(tx, i, 0.25 * i - 1);
      int64_t allocs = dev->stats.allocs;
      CHECK_EQ_INT(rt_program_run(prog, ins, pars, err, sizeof err), 0);
      CHECK_EQ_INT(dev->stats.allocs, allocs); /* nothing allocated while running */
      CHECK_EQ_INT(dev->stats.kernels, 2 * (run + 1)); /* the reshape is a view: no kernel */
      const rt_tensor *out = rt_program_output(prog, 0);
      CHECK(out->type.rank == 2 && out->type.dims[0] == 2 && out->type.dims[1] == 3);
      CHECK(donate ? out->data == tx->data : out->data != tx->data);
      for (int i = 0; i < 6; i++) {
        float want = (float)exp((double)(0.25f * i - 1) + 0.5);
        CHECK(((const float *)out->data)[i] == want);
        CHECK(rt_tensor_get(tp, i) == 0.5);
        if (!donate) CHECK(rt_tensor_get(tx, i) == 0.25 * i - 1);
      }
    }
    rt_program_free(prog);
    rt_tensor_free(tx);
    rt_tensor_free(tp);
    rt_device_close(dev);
  }
  ir_graph_free(g);
}

int main(void) {
  test_tensors();
  test_inplace_and_donation();
  test_random();
  test_peak_and_outputs();
  test_errors();
  test_determinism();
  test_wide_concat();
  return check_done();
}
