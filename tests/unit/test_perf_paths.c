/* tests/unit/test_perf_paths.c — the fast paths added for training speed,
 * each against a plain reference:
 *  - autodiff of x @ W with a batched x and a shared rank-2 W: dW is one
 *    2-D matmul over all rows (no batched product, no reduce_sum), with
 *    the right values; also for a tied W^T (x @ transpose(W));
 *  - the executor no longer zero-fills results of kernels that write every
 *    element: a matmul with an empty contraction (K = 0) still gives zeros
 *    after the same sizes were used and freed;
 *  - batched f32 x @ W computed as one product of all rows agrees with a
 *    per-batch double reference;
 *  - the fused kernel's f64 fast path (square (cast f64 $0)) is bitwise the
 *    unfused square of cast.
 * Tolerances: values 1e-5 relative (f32 products of a few terms); the
 * fused comparison is exact (memcmp).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pass.h"
#include "runtime.h"

static ir_graph *parse(const char *text) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = ir_parse("perf.ir", text, strlen(text), d);
  ir_diag_free(d);
  CHECK(g != NULL);
  return g;
}

static int run_passes(ir_graph *g) {
  static const pass_id ids[] = {PASS_AUTODIFF, PASS_CANONICALIZE};
  ir_diag *d = ir_diag_new(stderr);
  pass_options o = {.diag = d, .verify_each = true};
  int rc = pass_run_pipeline(g, ids, 2, &o);
  ir_diag_free(d);
  return rc;
}

static int count_op(const ir_graph *g, ir_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i]->dead && g->nodes[i]->op == op;
  return n;
}

/* x[2,3,4] with x = 0.1 * (index + 1), W[4,5]; loss = sum(x @ W): dW[k][n] =
 * sum over the 6 rows of x[., k], whatever n. */
static void check_dw(const char *text, bool tied) {
  ir_graph *g = parse(text);
  if (!g) return;
  CHECK_EQ_INT(run_passes(g), 0);
  CHECK_EQ_INT(count_op(g, IR_OP_REDUCE_SUM), 1); /* the loss only */
  int flat = 0, batched = 0; /* gradient matmuls */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_MATMUL || n->out[0]->role != IR_ROLE_GRAD) continue;
    if (n->out[0]->type.rank > 2) batched++;
    else flat++;
  }
  CHECK_EQ_INT(flat, 1);
  CHECK_EQ_INT(batched, 0);
  for (int i = 0; tied && i < g->n_nodes; i++) /* dW is never transposed into place */
    CHECK(g->nodes[i]->dead || g->nodes[i]->op != IR_OP_TRANSPOSE ||
          !ir_type_equal(&g->nodes[i]->out[0]->type, &g->params[0]->type));
  rt_tensor *x = rt_tensor_new(&g->inputs[0]->type), *w = rt_tensor_new(&g->params[0]->type);
  for (int i = 0; i < 24; i++) rt_tensor_set(x, i, 0.1 * (i + 1));
  for (int i = 0; i < 20; i++) rt_tensor_set(w, i, 0.01 * i - 0.05);
  rt_tensor *out[2] = {0};
  char err[256];
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, &x, &w, out, NULL, err, sizeof err), 0);
  if (out[1]) {
    const ir_type *t = &out[1]->type;
    int K = tied ? (int)t->dims[1] : (int)t->dims[0], N = tied ? (int)t->dims[0] : (int)t->dims[1];
    double maxerr = 0;
    for (int k = 0; k < K; k++) {
      double want = 0;
      for (int r = 0; r < 6; r++) want += (float)(0.1 * (r * 4 + k + 1));
      for (int n = 0; n < N; n++) {
        double got = rt_tensor_get(out[1], tied ? n * K + k : k * N + n);
        if (fabs(got - want) > maxerr) maxerr = fabs(got - want);
      }
    }
    CHECK_NEAR(maxerr, 0.0, 1e-5 * 15);
  }
  for (int i = 0; i < 2; i++) rt_tensor_free(out[i]);
  rt_tensor_free(x), rt_tensor_free(w);
  ir_graph_free(g);
}

static void test_weight_grad(void) {
  check_dw("tgc.ir 1\n"
           "graph @g\n"
           "  input %x : f32[2, 3, 4] loc 1:1\n"
           "  param %W : f32[4, 5] init zeros loc 1:1\n"
           "  %y = matmul %x, %W : f32[2, 3, 5] loc 2:1\n"
           "  %l = reduce_sum %y {axes = [0, 1, 2]} : f32[] loc 3:1\n"
           "  %dW = grad %l, %W : f32[4, 5] loc 4:1\n"
           "  output \"l\" = %l\n"
           "  output \"dW\" = %dW\n"
           "end\n",
           false);
  /* tied: y = x @ W^T with W[5, 4]; 6 rows * 5 < 4*5 + 6*4: the W^T form */
  check_dw("tgc.ir 1\n"
           "graph @g\n"
           "  input %x : f32[2, 3, 4] loc 1:1\n"
           "  param %W : f32[5, 4] init zeros loc 1:1\n"
           "  %wt = transpose %W {perm = [1, 0]} : f32[4, 5] loc 2:1\n"
           "  %y = matmul %x, %wt : f32[2, 3, 5] loc 2:1\n"
           "  %l = reduce_sum %y {axes = [0, 1, 2]} : f32[] loc 3:1\n"
           "  %dW = grad %l, %W : f32[5, 4] loc 4:1\n"
           "  output \"l\" = %l\n"
           "  output \"dW\" = %dW\n"
           "end\n",
           true);
}

/* Runs a one-output graph on the given inputs (no params). */
static rt_tensor *run1(const ir_graph *g, rt_tensor **in) {
  rt_tensor *out = NULL;
  char err[256];
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, &out, NULL, err, sizeof err), 0);
  return out;
}

static void test_uninitialized_results(void) {
  /* the same 4 MiB result shape first holds garbage, then an empty sum */
  ir_graph *g1 = parse("tgc.ir 1\ngraph @a\n  input %a : f32[1024, 1] loc 1:1\n  input %b : f32[1, 1024] loc 1:1\n"
                       "  %c = matmul %a, %b : f32[1024, 1024] loc 2:1\n  output \"c\" = %c\nend\n");
  ir_graph *g0 = parse("tgc.ir 1\ngraph @z\n  input %a : f32[1024, 0] loc 1:1\n  input %b : f32[0, 1024] loc 1:1\n"
                       "  %c = matmul %a, %b : f32[1024, 1024] loc 2:1\n  output \"c\" = %c\nend\n");
  if (!g1 || !g0) return;
  for (int round = 0; round < 3; round++) {
    rt_tensor *in1[2] = {rt_tensor_new(&g1->inputs[0]->type), rt_tensor_new(&g1->inputs[1]->type)};
    rt_tensor_fill(in1[0], 3.0), rt_tensor_fill(in1[1], -7.0);
    rt_tensor *c1 = run1(g1, in1);
    CHECK(c1 && rt_tensor_get(c1, 12345) == -21.0);
    rt_tensor_free(c1);
    rt_tensor *in0[2] = {rt_tensor_new(&g0->inputs[0]->type), rt_tensor_new(&g0->inputs[1]->type)};
    rt_tensor *c0 = run1(g0, in0);
    bool zeros = c0 != NULL;
    for (int64_t i = 0; zeros && i < 1024 * 1024; i++) zeros = ((const float *)c0->data)[i] == 0.0f;
    CHECK(zeros);
    rt_tensor_free(c0);
    for (int i = 0; i < 2; i++) rt_tensor_free(in1[i]), rt_tensor_free(in0[i]);
  }
  ir_graph_free(g1), ir_graph_free(g0);
}

static void test_batched_shared_matmul(void) {
  ir_graph *g = parse("tgc.ir 1\ngraph @m\n  input %x : f32[3, 2, 7, 33] loc 1:1\n  input %w : f32[33, 65] loc 1:1\n"
                      "  %y = matmul %x, %w : f32[3, 2, 7, 65] loc 2:1\n  output \"y\" = %y\nend\n");
  if (!g) return;
  rt_tensor *in[2] = {rt_tensor_new(&g->inputs[0]->type), rt_tensor_new(&g->inputs[1]->type)};
  for (int i = 0; i < 42 * 33; i++) rt_tensor_set(in[0], i, sin(0.37 * i));
  for (int i = 0; i < 33 * 65; i++) rt_tensor_set(in[1], i, cos(0.11 * i));
  rt_tensor *y = run1(g, in);
  double maxrel = 0;
  for (int r = 0; y && r < 42; r++)
    for (int n = 0; n < 65; n++) {
      double want = 0, mag = 0;
      for (int k = 0; k < 33; k++) {
        double p = rt_tensor_get(in[0], r * 33 + k) * rt_tensor_get(in[1], k * 65 + n);
        want += p, mag += fabs(p);
      }
      double rel = fabs(rt_tensor_get(y, r * 65 + n) - want) / (mag > 0 ? mag : 1);
      if (rel > maxrel) maxrel = rel;
    }
  CHECK(y != NULL);
  CHECK_NEAR(maxrel, 0.0, 1e-5);
  rt_tensor_free(y);
  for (int i = 0; i < 2; i++) rt_tensor_free(in[i]);
  ir_graph_free(g);
}

static void test_fused_f64(void) {
  ir_graph *gf = parse("tgc.ir 1\ngraph @f\n  input %x : f32[3000] loc 1:1\n"
                       "  %s = fused %x {expr = \"(neg (sqrt (square (cast f64 $0))))\"} : f64[3000] loc 2:1\n"
                       "  output \"s\" = %s\nend\n");
  ir_graph *gu = parse("tgc.ir 1\ngraph @u\n  input %x : f32[3000] loc 1:1\n"
                       "  %c = cast %x {to = f64} : f64[3000] loc 2:1\n  %q = square %c : f64[3000] loc 2:1\n"
                       "  %r = sqrt %q : f64[3000] loc 2:1\n  %s = neg %r : f64[3000] loc 2:1\n"
                       "  output \"s\" = %s\nend\n");
  if (!gf || !gu) return;
  rt_tensor *x = rt_tensor_new(&gf->inputs[0]->type);
  for (int i = 0; i < 3000; i++) rt_tensor_set(x, i, (i % 7 == 0 ? 1e30 : 1.0) * tan(0.013 * i - 19));
  rt_tensor *a = run1(gf, &x), *b = run1(gu, &x);
  CHECK(a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0);
  rt_tensor_free(a), rt_tensor_free(b), rt_tensor_free(x);
  ir_graph_free(gf), ir_graph_free(gu);
}

int main(void) {
  test_weight_grad();
  test_uninitialized_results();
  test_batched_shared_matmul();
  test_fused_f64();
  return check_done();
}
