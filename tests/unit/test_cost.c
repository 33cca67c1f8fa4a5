/* tests/unit/test_cost.c — the cost model (analysis/cost.c).
 *  - the three fp16 matmuls of the transformer issue: 4096x4096 @ 4096x4096,
 *    4096x32 @ 32x4096 and 32x4096 @ 4096x32 have arithmetic intensity 1365.3,
 *    31.5 and 15.9 FLOP/byte (each operand read once, the result written once;
 *    checked to 0.05);
 *  - every op of ops.def gets a finite, non-negative cost; bytes are operands
 *    + results, + each result again for a zero-filled op (IR_OPF_ZEROED)
 *    (embedding: ids + gathered rows + result; a view such as
 *    reshape: 0, the lowered program moves nothing) and elementwise ops
 *    cost one FLOP per result element (cast: 0);
 *  - the formulas of matmul (batched), einsum, softmax, layernorm, reductions;
 *  - fused ops (attention, attention_grad, fused, fused_matmul, add_layernorm)
 *    count the FLOPs of the ops they replace (a causal attention equals its
 *    unfused matmul, scale, mask, softmax, matmul exactly) and fewer bytes;
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
#include "testgraph.h"
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
    ir_value *in[8];
    ir_type out_t[8];
    for (int k = 0; k < 8; k++) in[k] = x, out_t[k] = x->type;
    CHECK(n_in <= 8 && n_out <= 8);
    if (n_in > 8 || n_out > 8) continue;
    if (op == IR_OP_EMBEDDING || op == IR_OP_CROSS_ENTROPY) in[1] = ids;
    ir_node *n = ir_graph_add_node(g, (ir_op)op, in, n_in, out_t, n_out, NULL, 0, NULL, (ir_loc){0});
    pass_cost c = pass_node_cost(n);
    bool finite = isfinite(c.flops) && isfinite(c.bytes) && c.flops >= 0 && c.bytes >= 0;
    if (!finite) fprintf(stderr, "op %s: flops %g bytes %g\n", ir_op_name((ir_op)op), c.flops, c.bytes);
    CHECK(finite);
    double want_bytes = 0;
    for (int i = 0; i < n_in; i++) want_bytes += bytes_of(in[i]);
    for (int i = 0; i < n_out; i++) want_bytes += bytes_of(n->out[i]);
    if (op == IR_OP_EMBEDDING) want_bytes = bytes_of(ids) + 2 * bytes_of(n->out[0]);
    if (op == IR_OP_EMBEDDING_GRAD) want_bytes += bytes_of(in[0]); /* its ids read twice: counted, then placed */
    CHECK(c.launches >= 0 && isfinite(c.launches));
    if (ir_op_has((ir_op)op, IR_OPF_ZEROED)) /* the executor's zero-fill writes each result once more */
      for (int i = 0; i < n_out; i++) want_bytes += bytes_of(n->out[i]);
    if (op == IR_OP_GRAD || ir_op_has((ir_op)op, IR_OPF_VIEW)) want_bytes = 0; /* a view moves nothing */
    if (op == IR_OP_LINEAR_CROSS_ENTROPY) /* its chunks re-read w and dw: held to its lowering by test_cost_lowering */
      want_bytes = c.bytes;
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

/* Fused ops cost the FLOPs of the unfused ops they replace, and fewer bytes.
 * Nodes added without inference (fused ops are typed by the fusion passes). */
static void test_fused(void) {
  ir_graph *g = ir_graph_new("fused", NULL);
  int64_t qd[4] = {2, 3, 8, 16};
  ir_value *q = input(g, "q", IR_DT_F32, 4, qd), *k = input(g, "k", IR_DT_F32, 4, qd), *v = input(g, "v", IR_DT_F32, 4, qd);
  /* unfused: softmax(causal_mask((q k^T) * scale)) v */
  int64_t perm[4] = {0, 1, 3, 2};
  ir_attr pat = ir_attr_ints("perm", perm, 4);
  ir_value *kt = ir_graph_build1(g, IR_OP_TRANSPOSE, &k, 1, &pat, 1, "kt", (ir_loc){0});
  ir_value *qk[2] = {q, kt};
  ir_value *sc = ir_graph_build1(g, IR_OP_MATMUL, qk, 2, NULL, 0, "s", (ir_loc){0});
  ir_attr val = ir_attr_float("value", 0.25);
  ir_type scalar = {IR_DT_F32, 0, {0}};
  ir_node *cn = ir_graph_add_node(g, IR_OP_CONST, NULL, 0, &scalar, 1, &val, 1, NULL, (ir_loc){0});
  ir_value *mul_in[2] = {sc, cn->out[0]};
  ir_value *scaled = ir_graph_build1(g, IR_OP_MUL, mul_in, 2, NULL, 0, "scaled", (ir_loc){0});
  ir_value *masked = ir_graph_build1(g, IR_OP_CAUSAL_MASK, &scaled, 1, NULL, 0, "masked", (ir_loc){0});
  ir_attr ax = ir_attr_int("axis", 3);
  ir_value *p = ir_graph_build1(g, IR_OP_SOFTMAX, &masked, 1, &ax, 1, "p", (ir_loc){0});
  ir_value *pv[2] = {p, v};
  ir_value *o = ir_graph_build1(g, IR_OP_MATMUL, pv, 2, NULL, 0, "o", (ir_loc){0});
  double unfused = 0, unfused_bytes = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    pass_cost c = pass_node_cost(g->nodes[i]);
    if (g->nodes[i]->op != IR_OP_CONST) unfused += c.flops, unfused_bytes += c.bytes;
  }
  ir_value *qkv[3] = {q, k, v};
  ir_type at[2] = {o->type, {IR_DT_F32, 3, {2, 3, 8}}};
  ir_attr aa[2] = {ir_attr_float("scale", 0.25), ir_attr_int("causal", 1)};
  ir_node *att = ir_graph_add_node(g, IR_OP_ATTENTION, qkv, 3, at, 2, aa, 2, NULL, (ir_loc){0});
  pass_cost ca = pass_node_cost(att);
  double b = 6, t = 8, s = 8, e = 16, f = 16;
  CHECK_NEAR(ca.flops, b * (2 * t * s * e + 7 * t * s + 2 * t * s * f), 0);
  CHECK_NEAR(ca.flops, unfused, 0);
  CHECK(ca.bytes < unfused_bytes);
  printf("attention [2,3,8,16] causal: %.0f FLOPs fused and unfused; bytes %.0f fused, %.0f unfused\n", ca.flops,
         ca.bytes, unfused_bytes);
  /* backward: 3 (recompute s, dq, dk) x 2TSE + 2 (dv, dp) x 2TSF + elementwise */
  ir_value *gin[6] = {q, k, v, o, att->out[1], o};
  ir_type gt[3] = {q->type, k->type, v->type};
  ir_node *ag = ir_graph_add_node(g, IR_OP_ATTENTION_GRAD, gin, 6, gt, 3, aa, 2, NULL, (ir_loc){0});
  CHECK_NEAR(pass_node_cost(ag).flops, b * (6 * t * s * e + 4 * t * s * f + 6 * t * s + 2 * t * f), 0);

  /* fused elementwise: (mul (add $0 $1) (tanh $2)) = 3 ops per element */
  ir_value *x = input(g, "x", IR_DT_F32, 2, (int64_t[]){4, 6});
  ir_value *xs[3] = {x, x, x};
  ir_attr ex = ir_attr_str("expr", "(mul (add $0 $1) (tanh $2))");
  ir_node *fu = ir_graph_add_node(g, IR_OP_FUSED, xs, 3, &x->type, 1, &ex, 1, NULL, (ir_loc){0});
  CHECK_NEAR(pass_node_cost(fu).flops, 3 * 24, 0);
  CHECK_NEAR(pass_node_cost(fu).bytes, 4 * 24 * 4, 0);
  ir_attr ex2 = ir_attr_str("expr", "(cast f32 (const f32 2))"); /* cast and const: 0 */
  ir_node *fu2 = ir_graph_add_node(g, IR_OP_FUSED, xs, 0, &x->type, 1, &ex2, 1, NULL, (ir_loc){0});
  CHECK_NEAR(pass_node_cost(fu2).flops, 0, 0);
  /* fused_matmul: [4,6] @ [6,5] + bias, gelu */
  ir_value *w = input(g, "w", IR_DT_F32, 2, (int64_t[]){6, 5}), *bias = input(g, "bias", IR_DT_F32, 1, (int64_t[]){5});
  ir_value *mm[3] = {x, w, bias};
  ir_attr ex3 = ir_attr_str("expr", "(gelu (add $0 $1))");
  ir_type mt = {IR_DT_F32, 2, {4, 5}};
  ir_node *fm = ir_graph_add_node(g, IR_OP_FUSED_MATMUL, mm, 3, &mt, 1, &ex3, 1, NULL, (ir_loc){0});
  CHECK_NEAR(pass_node_cost(fm).flops, 2.0 * 4 * 5 * 6 + 2 * 20, 0);
  /* add_layernorm: the add and layernorm's 8 per element */
  ir_value *gam = input(g, "gam", IR_DT_F32, 1, (int64_t[]){6});
  ir_value *al[4] = {x, x, gam, gam};
  ir_type alt[2] = {x->type, x->type};
  ir_attr eps = ir_attr_float("eps", 1e-5);
  ir_node *aln = ir_graph_add_node(g, IR_OP_ADD_LAYERNORM, al, 4, alt, 2, &eps, 1, NULL, (ir_loc){0});
  CHECK_NEAR(pass_node_cost(aln).flops, 9 * 24, 0);
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
    loss = test_sum_all(g, loss);
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

/* Bytes one rank sends, by the ring closed forms, per op and axis. */
static void test_comm(void) {
  ir_graph *g = ir_graph_new("comm", NULL);
  g->mesh.size[IR_AXIS_DP] = 4;
  g->mesh.size[IR_AXIS_PP] = 2;
  ir_value *x = input(g, "x", IR_DT_F32, 2, (int64_t[]){4, 6}); /* 96 bytes */
  struct {
    ir_op op;
    ir_axis axis;
    int n;
    double want_comm, want_flops;
  } cases[] = {
      {IR_OP_ALL_REDUCE, IR_AXIS_DP, 4, 2 * 96 * 3 / 4.0, 24 * 3 / 4.0}, {IR_OP_ALL_GATHER, IR_AXIS_DP, 4, 3 * 96, 0},
      {IR_OP_REDUCE_SCATTER, IR_AXIS_DP, 4, 96 * 3 / 4.0, 18},          {IR_OP_ALL_TO_ALL, IR_AXIS_DP, 4, 72, 0},
      {IR_OP_COMM_BROADCAST, IR_AXIS_DP, 4, 96, 0},                      {IR_OP_SEND, IR_AXIS_PP, 2, 96, 0},
      {IR_OP_MESH_SLICE, IR_AXIS_DP, 4, 0, 0},                           {IR_OP_ALL_REDUCE, IR_AXIS_DP, 1, 0, 0},
  };
  pass_graph_cost gc;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    ir_attr a[5] = {ir_attr_mesh_axis("axis", cases[k].axis), ir_attr_int("n", cases[k].n), ir_attr_int("dim", 0),
                    ir_attr_int("split_dim", 0), ir_attr_int("concat_dim", 1)};
    ir_op op = cases[k].op;
    ir_attr extra = op == IR_OP_SEND ? ir_attr_int("peer", 1) : ir_attr_int("root", 0);
    ir_attr at[4] = {a[0], a[1]};
    int na = 2;
    if (op == IR_OP_ALL_GATHER || op == IR_OP_REDUCE_SCATTER || op == IR_OP_MESH_SLICE) at[na++] = a[2];
    if (op == IR_OP_ALL_TO_ALL) at[na++] = a[3], at[na++] = a[4];
    if (op == IR_OP_SEND || op == IR_OP_COMM_BROADCAST) at[na++] = extra;
    char err[256];
    ir_node *n = ir_graph_build(g, op, &x, 1, at, na, NULL, NULL, (ir_loc){0}, err, sizeof err);
    if (!n) fprintf(stderr, "%s: %s\n", ir_op_name(op), err);
    CHECK(n != NULL);
    if (!n) continue;
    pass_cost c = pass_node_cost(n);
    if (c.comm != cases[k].want_comm || c.flops != cases[k].want_flops)
      fprintf(stderr, "%s n=%d: comm %g flops %g, want %g %g\n", ir_op_name(op), cases[k].n, c.comm, c.flops,
              cases[k].want_comm, cases[k].want_flops);
    CHECK(c.comm == cases[k].want_comm && c.flops == cases[k].want_flops);
  }
  pass_graph_cost_of(g, &gc);
  CHECK(gc.comm[IR_OP_ALL_REDUCE][IR_AXIS_DP] == 144);
  CHECK(gc.comm[IR_OP_SEND][IR_AXIS_PP] == 96);
  CHECK(gc.comm[IR_OP_SEND][IR_AXIS_DP] == 0);
  CHECK(pass_comm_bytes(IR_OP_RECV, 4, 100) == 0);
  /* the exact tally per rank: the closed forms when counts divide (x: 24
   * f32 elements, 96 bytes), chunks of 24/4 = 6 */
  pass_comm_tally t[IR_NUM_OPS][IR_NUM_AXES];
  int coord[IR_NUM_AXES] = {1, 3, 0};
  pass_comm_tally_of(g, coord, t);
  CHECK(t[IR_OP_ALL_REDUCE][IR_AXIS_DP].calls == 1 && t[IR_OP_ALL_REDUCE][IR_AXIS_DP].sent == 2 * 3 * 96 / 4);
  CHECK(t[IR_OP_ALL_GATHER][IR_AXIS_DP].sent == 3 * 96 && t[IR_OP_ALL_GATHER][IR_AXIS_DP].received == 3 * 96);
  CHECK(t[IR_OP_REDUCE_SCATTER][IR_AXIS_DP].sent == 3 * 96 / 4);
  CHECK(t[IR_OP_COMM_BROADCAST][IR_AXIS_DP].sent == 0 && t[IR_OP_COMM_BROADCAST][IR_AXIS_DP].received == 96); /* dp 3: last of the chain from 0 */
  CHECK(t[IR_OP_SEND][IR_AXIS_PP].sent == 96 && t[IR_OP_SEND][IR_AXIS_PP].received == 0);
  /* an all-reduce whose count does not divide: 10 elements over 4 ranks, chunks 3 3 2 2 */
  ir_graph *h = ir_graph_new("uneven", NULL);
  h->mesh.size[IR_AXIS_DP] = 4;
  ir_value *y = input(h, "y", IR_DT_F32, 1, (int64_t[]){10});
  ir_attr at[2] = {ir_attr_mesh_axis("axis", IR_AXIS_DP), ir_attr_int("n", 4)};
  ir_graph_build1(h, IR_OP_ALL_REDUCE, &y, 1, at, 2, NULL, (ir_loc){0});
  int64_t want_sent[4] = {2 * 10 - 3 - 3, 2 * 10 - 3 - 2, 2 * 10 - 2 - 2, 2 * 10 - 2 - 3};
  for (int r = 0; r < 4; r++) {
    int c2[IR_NUM_AXES] = {0, r, 0};
    pass_comm_tally_of(h, c2, t);
    CHECK_EQ_INT(t[IR_OP_ALL_REDUCE][IR_AXIS_DP].sent, want_sent[r] * 4);
  }
  ir_graph_free(h);
  ir_graph_free(g);
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
  test_fused();
  test_gradient_cost();
  test_comm();
  return check_done();
}
