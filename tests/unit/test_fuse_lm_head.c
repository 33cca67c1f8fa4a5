/* tests/unit/test_fuse_lm_head.c — fuse-lm-head and linear_cross_entropy.
 *
 * The training graph of examples/gpt.tg --config tiny (as `tgc stats`
 * builds it: pass_build_training_graph) with the pass and without it
 * (--disable-pass fuse-lm-head), run on the cpu with the same seeded
 * inputs and parameters: every output (the loss, every gradient) of the
 * fused graph within 1e-5 of the unfused one's (relative to the tensor's
 * largest magnitude) in f32 and 1e-12 in f64, with the pass's chunk (every
 * row at once) and with chunks of 16 and 24 rows (4 and 3 chunks, the last
 * one short; the op's chunk attribute and buffer type edited; testgpu.h's
 * compare_tensors prints the first mismatches and the worst). The fused
 * graph has one linear_cross_entropy and no value of the logits' type; it
 * also runs on cuda-emu (generated kernels, the emulated cuBLAS with dw
 * accumulated over chunks) within 1e-5 of the cpu in f32, and its lowered
 * step moves what the cost model counts, exactly. All of it with B = 4
 * (64 rows > D = 32: the tied table's gradient product comes out [D, V],
 * transposed, then added to the embedding's) and B = 2 (32 rows: it comes
 * out [V, D] as a fused_matmul adding the embedding's gradient, which the
 * pass keeps as an add after the op's dw).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"
#include "testgpu.h"
#include "testtrain.h"

static ir_diag *diag;

static ir_graph *training_graph(bool fuse, bool f64, const char *batch) {
  size_t len = 0;
  char *text = ir_read_file("examples/gpt.tg", 1 << 20, &len, diag);
  fe_define b = {"B", batch};
  fe_options fo = {.config = "tiny", .defines = &b, .n_defines = 1};
  ir_graph *g = text ? fe_compile("examples/gpt.tg", text, len, &fo, diag) : NULL;
  free(text);
  if (g && f64) { /* every "f32" of the text made "f64" */
    char *t = ir_print_to_string(g);
    for (char *p = t; (p = strstr(p, "f32")); p += 3) p[2] = '4', p[1] = '6';
    ir_graph_free(g);
    g = ir_parse("f64", t, strlen(t), diag);
    free(t);
  }
  if (!g) return NULL;
  bool disabled[PASS_COUNT] = {false};
  disabled[PASS_FUSE_LM_HEAD] = !fuse;
  pass_options po = {.diag = diag, .verify_each = true, .disabled = disabled};
  pass_train_graph_options to = {.passes = &po, .any_model = true, .dtype = -1};
  pass_train_graph_info info;
  int rc = pass_build_training_graph(g, &to, &info);
  pass_train_graph_info_free(&info);
  if (rc != 0) ir_graph_free(g);
  return rc == 0 ? g : NULL;
}

static ir_node *find_op(const ir_graph *g, ir_op op, int *count) {
  ir_node *f = NULL;
  *count = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == op) f = g->nodes[i], ++*count;
  return f;
}

/* The op's chunk made `rows` (its buffer's type follows). */
static void set_chunk(ir_graph *g, ir_node *f, int64_t rows) {
  for (int i = 0; i < f->n_attrs; i++)
    if (strcmp(f->attrs[i].key, "chunk") == 0) f->attrs[i].i = rows;
  f->out[4]->type.dims[0] = rows;
  CHECK_EQ_INT(ir_verify(g, diag), 0);
}

/* The op's step in the lowered program moves what analysis/cost.c counts
 * (exactly: both are sums of whole tensor sizes), with several chunks (w and
 * dw re-read per chunk; test_cost_lowering's graphs have one). */
static void check_bytes(const ir_graph *g, const ir_node *f) {
  pass_plan *plan = pass_memplan(g, NULL);
  char err[512];
  cg_program *p = plan ? cg_lower(g, plan, NULL, err, sizeof err) : NULL;
  if (!p) fprintf(stderr, "lowering: %s\n", plan ? err : "no plan");
  CHECK(p != NULL);
  int found = 0;
  for (int s = 0; p && s < plan->n_steps; s++)
    if (g->nodes[plan->steps[s].node] == f) {
      double want = pass_node_cost(f).bytes, got = p->steps[s].bytes;
      if (want != got) fprintf(stderr, "linear_cross_entropy: cost %.0f bytes, lowered %.0f\n", want, got);
      CHECK(want == got);
      found++;
    }
  CHECK_EQ_INT(found, p ? 1 : 0);
  cg_program_free(p);
  pass_plan_free(plan);
}

static rt_tensor **run(const ir_graph *g, const rt_backend *be) {
  rt_tensor **in = calloc((size_t)g->n_inputs + 1, sizeof *in), **pa = calloc((size_t)g->n_params + 1, sizeof *pa);
  rt_tensor **out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  for (int i = 0; i < g->n_inputs; i++) {
    in[i] = rt_tensor_new(&g->inputs[i]->type);
    rt_fill_random(in[i], 7, g->inputs[i]->name, 64); /* tokens and targets below V = 64 */
  }
  for (int i = 0; i < g->n_params; i++) {
    pa[i] = rt_tensor_new(&g->params[i]->type);
    rt_fill_random(pa[i], 11, g->params[i]->name, 0);
  }
  char err[512];
  int rc = rt_run(be, g, in, pa, out, NULL, err, sizeof err);
  if (rc != 0) fprintf(stderr, "run failed: %s\n", err);
  CHECK_EQ_INT(rc, 0);
  for (int i = 0; i < g->n_inputs; i++) rt_tensor_free(in[i]);
  for (int i = 0; i < g->n_params; i++) rt_tensor_free(pa[i]);
  free(in), free(pa);
  if (rc != 0) {
    free(out);
    return NULL;
  }
  return out;
}

static void free_outs(rt_tensor **o, int n) {
  for (int i = 0; o && i < n; i++) rt_tensor_free(o[i]);
  free(o);
}

/* Every output of a within tol of b's (relative to the tensor's scale: testgpu.h). */
static void compare(const char *what, const ir_graph *g, rt_tensor **a, rt_tensor **b, double tol) {
  for (int i = 0; a && b && i < g->n_outputs; i++) {
    char name[160];
    snprintf(name, sizeof name, "%s: output %s", what, g->outputs[i].name);
    CHECK_EQ_INT(compare_tensors(name, a[i], b[i], tol, NULL), 0);
  }
}

static void test_against_unfused(bool f64, int batch) {
  char bs[16];
  snprintf(bs, sizeof bs, "%d", batch);
  ir_graph *gu = training_graph(false, f64, bs), *gf = training_graph(true, f64, bs);
  CHECK(gu && gf);
  if (!gu || !gf) {
    ir_graph_free(gu), ir_graph_free(gf);
    return;
  }
  int n;
  ir_node *f = find_op(gf, IR_OP_LINEAR_CROSS_ENTROPY, &n);
  CHECK_EQ_INT(n, 1);
  find_op(gu, IR_OP_LINEAR_CROSS_ENTROPY, &n);
  CHECK_EQ_INT(n, 0);
  find_op(gf, IR_OP_CROSS_ENTROPY_GRAD, &n);
  CHECK_EQ_INT(n, 0);
  CHECK_EQ_INT(gf->n_outputs, gu->n_outputs);
  int64_t rows = batch * 16;
  for (int i = 0; i < gf->n_values; i++) { /* no value of the logits' type [B, 16, 64] */
    const ir_type *t = &gf->values[i]->type;
    CHECK(!(t->rank == 3 && t->dims[0] == batch && t->dims[1] == 16 && t->dims[2] == 64));
  }
  /* the op's dw is added to the embedding's gradient (B = 2, rows <= D: the add was the epilogue of
   * the tied table's gradient product, a fused_matmul) */
  int adds = 0;
  for (int i = 0; f && i < gf->n_nodes; i++)
    adds += gf->nodes[i]->op == IR_OP_FUSED && gf->nodes[i]->n_in == 2 && gf->nodes[i]->in[0] == f->out[2];
  CHECK_EQ_INT(adds, 1);
  find_op(gu, IR_OP_FUSED_MATMUL, &n);
  int epilogues = n;
  find_op(gf, IR_OP_FUSED_MATMUL, &n);
  CHECK_EQ_INT(epilogues - n, (batch == 2));
  /* the op's FLOPs by phase: the forward keeps the logits product and the loss, plus the argmax it
   * computes (N V, read by nobody here); the backward keeps the rest */
  pass_graph_cost cf, cu;
  pass_graph_cost_of(gf, &cf);
  pass_graph_cost_of(gu, &cu);
  CHECK_EQ_INT((int64_t)(cf.flops[PASS_PHASE_FORWARD] - cu.flops[PASS_PHASE_FORWARD] + 0.5), rows * 64);
  CHECK(fabs(cf.flops[PASS_PHASE_BACKWARD] - cu.flops[PASS_PHASE_BACKWARD]) < 0.5);
  double tol = f64 ? 1e-12 : 1e-5;
  rt_tensor **ou = run(gu, &rt_cpu_backend);
  const int64_t chunks[] = {rows, 16, 24};
  for (int c = 0; f && c < 3; c++) {
    if (c) set_chunk(gf, f, chunks[c]);
    rt_tensor **of = run(gf, &rt_cpu_backend);
    char what[64];
    snprintf(what, sizeof what, "%s B %d chunk %lld", f64 ? "f64" : "f32", batch, (long long)chunks[c]);
    compare(what, gf, of, ou, tol);
    check_bytes(gf, f);
    if (!f64 && c) { /* the generated kernels and products, several chunks */
      rt_tensor **oe = run(gf, &rt_cuda_emu_backend);
      snprintf(what, sizeof what, "cuda-emu B %d chunk %lld", batch, (long long)chunks[c]);
      compare(what, gf, oe, of, 1e-5);
      free_outs(oe, gf->n_outputs);
    }
    free_outs(of, gf->n_outputs);
  }
  free_outs(ou, gu->n_outputs);
  ir_graph_free(gu), ir_graph_free(gf);
}

/* `tgc train` of gpt tiny (copy) for 10 steps with and without the pass, in
 * f32 and in mixed precision bf16 and f16 (the losses read the logits
 * through a cast to f32): the step graph has the op, and every step's loss
 * is within 1e-5 relative of the unfused run's (bf16 / f16: 1e-3; the
 * products and row sums are the same, the 16-bit dw sums of the chunk
 * products round in another place). */
static void test_training(int dtype) {
  enum { STEPS = 10 };
  double loss[2][STEPS];
  for (int fuse = 0; fuse < 2; fuse++) {
    bool disabled[PASS_COUNT] = {[PASS_FUSE_LM_HEAD] = !fuse};
    setup c = {.path = "examples/gpt.tg", .config = "tiny", .data = "copy", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
               .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.003, .total = STEPS}, .micro = 1, .seed = 3,
               .dtype = dtype, .disabled = disabled, .verify_each = true};
    session s;
    int rc = session_open(&s, &c);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
      session_close(&s);
      return;
    }
    int n;
    find_op(s.g, IR_OP_LINEAR_CROSS_ENTROPY, &n);
    CHECK_EQ_INT(n, fuse);
    for (int k = 0; k < STEPS; k++) {
      char err[1024];
      rt_step_result r;
      int sr = rt_trainer_step(s.tr, &r, err, sizeof err);
      if (sr) fprintf(stderr, "step %d: %s\n", k + 1, err);
      CHECK_EQ_INT(sr, 0);
      loss[fuse][k] = r.loss;
    }
    session_close(&s);
  }
  double tol = dtype ? 1e-3 : 1e-5;
  for (int k = 0; k < STEPS; k++) {
    double e = fabs(loss[1][k] - loss[0][k]) / fabs(loss[0][k]);
    if (!(e <= tol))
      fprintf(stderr, "  %s step %d: loss %.9g fused, %.9g unfused (rel %.3g)\n", dtype ? ir_dtype_name(dtype) : "f32", k + 1,
              loss[1][k], loss[0][k], e);
    CHECK(e <= tol);
  }
}

int main(void) {
  diag = ir_diag_new(stderr);
  test_against_unfused(false, 4);
  test_against_unfused(true, 4);
  test_against_unfused(false, 2);
  test_against_unfused(true, 2);
  test_training(0);
  test_training(IR_DT_BF16);
  test_training(IR_DT_F16);
  ir_diag_free(diag);
  return check_done();
}
