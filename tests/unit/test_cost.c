/* tests/unit/test_cost.c — the cost model (passes/cost.c).
 *  - the three fp16 matmuls of the transformer issue: 4096x4096 @ 4096x4096,
 *    4096x32 @ 32x4096 and 32x4096 @ 4096x32 have arithmetic intensity 1365.3,
 *    31.5 and 15.9 FLOP/byte (each operand read once, the result written once;
 *    checked to 0.05);
 *  - every op of ops.def gets a finite, non-negative cost; bytes are operands
 *    + results (embedding: ids + gathered rows + result) and elementwise ops
 *    cost one FLOP per result element (cast: 0);
 *  - the formulas of matmul (batched), einsum, softmax, layernorm, reductions;
 *  - graph totals split by phase;
 *  - the cost of a gradient (forward + backward, the training graph built as
 *    `tgc stats` builds it and differentiated by the autodiff pass) over the
 *    forward: <= 5 on examples/straight_line.tg (the Baur-Strassen bound), and
 *    in [2.5, 3.5] ("about 3") on the matmul-dominated transformer_block.tg
 *    and mlp.tg at D = M = 256.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "pass.h"

static ir_value *input(ir_graph *g, const char *name, ir_dtype dt, int rank, const int64_t *dims) {
  ir_type t = {dt, rank, {0}};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return ir_graph_add_input(g, name, t, (ir_loc){0});
}

static double intensity_of_matmul(int64_t m, int64_t k, int64_t n) {
  ir_graph *g = ir_graph_new("mm", NULL);
  ir_value *a = input(g, "a", IR_DT_F16, 2, (int64_t[]){m, k});
  ir_value *b = input(g, "b", IR_DT_F16, 2, (int64_t[]){k, n});
  ir_value *ab[2] = {a, b};
  ir_value *c = ir_graph_build1(g, IR_OP_MATMUL, ab, 2, NULL, 0, "c", (ir_loc){0});
  pass_cost cost = pass_node_cost(c->def);
  CHECK_NEAR(cost.flops, 2.0 * (double)m * (double)n * (double)k, 0);
  CHECK_NEAR(cost.bytes, 2.0 * (double)(m * k + k * n + m * n), 0);
  ir_graph_free(g);
  return cost.flops / cost.bytes;
}

static double bytes_of(const ir_value *v) {
  double b = (double)ir_dtype_size(v->type.dtype);
  for (int i = 0; i < v->type.rank; i++) b *= (double)v->type.dims[i];
  return b;
}

/* Every op, on operands of a plausible shape (nodes added without inference:
 * the cost model must not depend on attributes being present). */
static void test_all_ops(void) {
  ir_graph *g = ir_graph_new("ops", NULL);
  ir_value *x = input(g, "x", IR_DT_F32, 2, (int64_t[]){4, 6});
  ir_value *ids = input(g, "ids", IR_DT_I32, 1, (int64_t[]){4});
  int covered = 0;
  for (int op = 0; op < IR_NUM_OPS; op++) {
    int n_in = ir_op_num_inputs((ir_op)op), n_out = ir_op_num_outputs((ir_op)op);
    if (n_in < 0) n_in = 2;
    if (n_out < 0) n_out = 2;
    ir_value *in[4] = {x, x, x, x};
    if (op == IR_OP_EMBEDDING || op == IR_OP_CROSS_ENTROPY) in[1] = ids;
    ir_type out_t[4] = {x->type, x->type, x->type, x->type};
    ir_node *n = ir_graph_add_node(g, (ir_op)op, in, n_in, out_t, n_out, NULL, 0, NULL, (ir_loc){0});
    pass_cost c = pass_node_cost(n);
    bool finite = isfinite(c.flops) && isfinite(c.bytes) && c.flops >= 0 && c.bytes >= 0;
    if (!finite) fprintf(stderr, "op %s: flops %g bytes %g\n", ir_op_name((ir_op)op), c.flops, c.bytes);
    CHECK(finite);
    double want_bytes = 0;
    for (int i = 0; i < n_in; i++) want_bytes += bytes_of(in[i]);
    for (int i = 0; i < n_out; i++) want_bytes += bytes_of(n->out[i]);
    if (op == IR_OP_EMBEDDING) want_bytes = bytes_of(ids) + 2 * bytes_of(n->out[0]);
    if (op == IR_OP_GRAD) want_bytes = 0;
    if (c.bytes != want_bytes) fprintf(stderr, "op %s: bytes %g, want %g\n", ir_op_name((ir_op)op), c.bytes, want_bytes);
    CHECK(c.bytes == want_bytes);
    if (ir_op_is_elementwise((ir_op)op) || op == IR_OP_SIGN || op == IR_OP_GELU_GRAD) {
      double want = op == IR_OP_CAST ? 0 : 24;
      if (c.flops != want) fprintf(stderr, "op %s: flops %g, want %g\n", ir_op_name((ir_op)op), c.flops, want);
      CHECK(c.flops == want);
    }
    CHECK(pass_node_phase(n) == PASS_PHASE_FORWARD);
    covered++;
  }
  CHECK_EQ_INT(covered, IR_NUM_OPS);
  /* a malformed node or none at all */
  pass_cost z = pass_node_cost(NULL);
  CHECK(z.flops == 0 && z.bytes == 0);
  ir_graph_free(g);
}

static void test_formulas(void) {
  ir_graph *g = ir_graph_new("f", NULL);
  ir_value *a = input(g, "a", IR_DT_F32, 3, (int64_t[]){5, 8, 16});
  ir_value *b = input(g, "b", IR_DT_F32, 3, (int64_t[]){5, 16, 4});
  ir_value *ab[2] = {a, b};
  ir_value *mm = ir_graph_build1(g, IR_OP_MATMUL, ab, 2, NULL, 0, "mm", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(mm->def).flops, 2.0 * 5 * 8 * 4 * 16, 0);
  ir_attr eq = ir_attr_str("eq", "bij,bjk->bik");
  ir_value *es = ir_graph_build1(g, IR_OP_EINSUM, ab, 2, &eq, 1, "es", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(es->def).flops, pass_node_cost(mm->def).flops, 0);
  ir_attr ax = ir_attr_int("axis", 2);
  ir_value *sm = ir_graph_build1(g, IR_OP_SOFTMAX, &a, 1, &ax, 1, "sm", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(sm->def).flops, 5.0 * 5 * 8 * 16, 0);
  ir_value *gam = input(g, "gam", IR_DT_F32, 1, (int64_t[]){16});
  ir_value *ln_in[3] = {a, gam, gam};
  ir_attr eps = ir_attr_float("eps", 1e-5);
  ir_value *ln = ir_graph_build1(g, IR_OP_LAYERNORM, ln_in, 3, &eps, 1, "ln", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(ln->def).flops, 8.0 * 5 * 8 * 16, 0);
  int64_t axes[1] = {2};
  ir_attr rat[2] = {ir_attr_ints("axes", axes, 1), ir_attr_int("keepdims", 0)};
  ir_value *rs = ir_graph_build1(g, IR_OP_REDUCE_SUM, &a, 1, rat, 2, "rs", (ir_loc){0});
  ir_value *rm = ir_graph_build1(g, IR_OP_REDUCE_MEAN, &a, 1, rat, 2, "rm", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(rs->def).flops, 640, 0);
  CHECK_NEAR(pass_node_cost(rm->def).flops, 640 + 40, 0);
  int64_t perm[3] = {0, 2, 1};
  ir_attr pat = ir_attr_ints("perm", perm, 3);
  ir_value *tr = ir_graph_build1(g, IR_OP_TRANSPOSE, &a, 1, &pat, 1, "tr", (ir_loc){0});
  CHECK_NEAR(pass_node_cost(tr->def).flops, 0, 0);
  CHECK_NEAR(pass_node_cost(tr->def).bytes, 2 * 640 * 4, 0);
  /* phases and totals */
  tr->role = IR_ROLE_GRAD;
  rm->role = IR_ROLE_RECOMPUTE;
  pass_graph_cost c;
  pass_graph_cost_of(g, &c);
  CHECK(pass_node_phase(tr->def) == PASS_PHASE_BACKWARD);
  CHECK(pass_node_phase(rm->def) == PASS_PHASE_RECOMPUTE);
  CHECK_NEAR(c.flops[PASS_PHASE_RECOMPUTE], 680, 0);
  CHECK_NEAR(c.flops[PASS_PHASE_BACKWARD], 0, 0);
  CHECK_NEAR(c.flops[PASS_PHASE_FORWARD], 2.0 * 2 * 5 * 8 * 4 * 16 + 5.0 * 640 + 8.0 * 640 + 640, 0);
  CHECK_EQ_INT(c.op_count[IR_OP_MATMUL], 1);
  CHECK_STR(pass_phase_name(PASS_PHASE_OPTIMIZER), "optimizer");
  ir_graph_free(g);
}

/* (forward + backward) / forward FLOPs of FILE's training graph. */
static double gradient_ratio(const char *file, const fe_define *defs, int n_defs) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(file, 1 << 20, &len, d);
  fe_options fo = {.defines = defs, .n_defines = n_defs};
  ir_graph *g = text ? fe_compile(file, text, len, &fo, d) : NULL;
  double ratio = -1;
  if (g) {
    ir_value *loss = g->outputs[0].value;
    if (loss->type.rank > 0) {
      int64_t axes[IR_MAX_RANK];
      for (int i = 0; i < loss->type.rank; i++) axes[i] = i;
      ir_attr at[2] = {ir_attr_ints("axes", axes, loss->type.rank), ir_attr_int("keepdims", 0)};
      loss = ir_graph_build1(g, IR_OP_REDUCE_SUM, &loss, 1, at, 2, "sumloss", loss->loc);
    }
    ir_value *wrt[64] = {loss};
    ir_type types[64];
    int n = 0;
    for (int i = 0; i < g->n_params && n < 63; i++) wrt[1 + n++] = g->params[i];
    if (n == 0) /* no parameters: differentiate by the inputs, as tgc stats does */
      for (int i = 0; i < g->n_inputs && n < 63; i++) wrt[1 + n++] = g->inputs[i];
    for (int i = 0; i < n; i++) types[i] = wrt[1 + i]->type;
    ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, n + 1, types, n, NULL, 0, NULL, loss->loc);
    for (int i = 0; i < n; i++) ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
    pass_options o = {.diag = d, .verify_each = true};
    if (pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o) == 0) {
      pass_graph_cost c;
      pass_graph_cost_of(g, &c);
      ratio = (c.flops[PASS_PHASE_FORWARD] + c.flops[PASS_PHASE_BACKWARD]) / c.flops[PASS_PHASE_FORWARD];
      printf("%-32s forward %12.0f backward %12.0f FLOPs: gradient/forward %.3f\n", file,
             c.flops[PASS_PHASE_FORWARD], c.flops[PASS_PHASE_BACKWARD], ratio);
    }
  }
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
  return ratio;
}

static void test_gradient_cost(void) {
  double r = gradient_ratio("examples/straight_line.tg", NULL, 0);
  CHECK(r > 1 && r <= 5);
  r = gradient_ratio("examples/transformer_block.tg", NULL, 0);
  CHECK(r >= 2.5 && r <= 3.5);
  fe_define big[2] = {{"D", "256"}, {"M", "256"}};
  r = gradient_ratio("examples/mlp.tg", big, 2);
  CHECK(r >= 2.5 && r <= 3.5);
}

int main(void) {
  double i1 = intensity_of_matmul(4096, 4096, 4096);
  double i2 = intensity_of_matmul(4096, 32, 4096);
  double i3 = intensity_of_matmul(32, 4096, 32);
  printf("fp16 matmul intensities: %.2f %.2f %.2f FLOP/byte\n", i1, i2, i3);
  CHECK_NEAR(i1, 1365.3, 0.05 / 1365.3);
  CHECK_NEAR(i2, 31.5, 0.05 / 31.5);
  CHECK_NEAR(i3, 15.9, 0.05 / 15.9);
  test_all_ops();
  test_formulas();
  test_gradient_cost();
  return check_done();
}
