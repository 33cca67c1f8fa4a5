/* tests/unit/test_fuse_attention.c — the fuse-attention pass end to end.
 *
 *  - the pass finds the attention of examples/gpt.tg (causal, scale
 *    1/sqrt(Hd) as f32 stores it), reverse.tg (not causal, x / sqrt(H)) and
 *    transformer_block.tg (x / sqrt(D)), one per layer, and no softmax is
 *    left; the training graph then holds attention_grad nodes and no T x T
 *    value at all;
 *  - outputs and gradients (every parameter's, through the default pipeline:
 *    fuse-attention, autodiff, canonicalize, checkpoint) equal those of the
 *    same graph run through the pipeline without fuse-attention, within
 *    1e-5 relative in f32 and 1e-12 in f64 (max |fused - unfused| over max
 *    |unfused| of each output), on gpt tiny, reverse tiny,
 *    transformer_block, and hand-written graphs: not causal with T != S (in
 *    one key block and across three), causal with T < S; f64 versions are
 *    the same graphs with every f32 made f64. Parameters are N(0, 0.3) so
 *    the softmax rows are far from uniform;
 *    llama tiny with nKV = 2 (grouped-query: the fused attention reads the 2
 *    kv heads in place, the backward repeats them and sums dk, dv per group)
 *    is among them;
 *  - forward mode: the JVP of the loss through the fused op equals the
 *    unfused one (f64, 1e-12), llama GQA too;
 *  - the kernels are deterministic: 1 and 2 OpenMP threads give identical bits;
 *  - peak memory at T = 2048 (gpt tiny, -D ctx=2048, forward): the predicted
 *    peak (pass_predict_peak_bytes, equal to what the executor measures) of
 *    the unfused graph holds two B·nH·T² f32 score tensors (at the scale
 *    node both the raw and the scaled scores are live) that the fused graph
 *    does not; the fused forward is run once (about 1 s; skipped under
 *    AddressSanitizer) and its measured peak checked.
 * Near-miss patterns are in tests/passes/fuse_attention_near_miss.ir.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "testgraph.h"
#include "frontend.h"
#include "pass.h"
#include "runtime.h"

static ir_diag *diag;

/* ---- loading ---- */

/* Every "f32" of the text made "f64" (types, casts): the f64 twin of a graph. */
static ir_graph *to_f64(ir_graph *g) {
  char *text = ir_print_to_string(g);
  for (char *p = text; (p = strstr(p, "f32")); p += 3) p[2] = '4', p[1] = '6';
  ir_graph *h = ir_parse("f64", text, strlen(text), diag);
  free(text);
  ir_graph_free(g);
  return h;
}

static ir_graph *load_tg(const char *path, const char *config, const fe_define *defs, int n_defs, bool f64) {
  size_t len = 0;
  char *text = ir_read_file(path, 1 << 20, &len, diag);
  if (!text) return NULL;
  fe_options fo = {.config = config, .defines = defs, .n_defines = n_defs};
  ir_graph *g = fe_compile(path, text, len, &fo, diag);
  free(text);
  if (g && f64) g = to_f64(g);
  return g;
}

static ir_graph *load_ir(const char *text, bool f64) {
  ir_graph *g = ir_parse("test.ir", text, strlen(text), diag);
  if (g && f64) g = to_f64(g);
  return g;
}

/* A GRAD node of the first output (summed if not a scalar) with respect to
 * every parameter; the gradients become outputs d_<param>. */
static void add_grad(ir_graph *g) {
  ir_value *loss = g->outputs[0].value;
  loss = test_sum_all(g, loss);
  int n = g->n_params;
  ir_value **wrt = malloc((size_t)(n + 1) * sizeof *wrt);
  ir_type *types = malloc((size_t)(n > 0 ? n : 1) * sizeof *types);
  wrt[0] = loss;
  for (int i = 0; i < n; i++) wrt[1 + i] = g->params[i], types[i] = g->params[i]->type;
  ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, n + 1, types, n, NULL, 0, NULL, loss->loc);
  for (int i = 0; i < n; i++) {
    char name[256];
    snprintf(name, sizeof name, "d_%s", g->params[i]->name);
    ir_graph_add_output(g, name, gn->out[i]);
  }
  free(wrt);
  free(types);
}

/* The default pipeline, with or without fuse-attention. */
static int run_passes(ir_graph *g, bool fuse) {
  pass_id list[32];
  int n = 0;
  for (int i = 0; i < pass_default_pipeline_len && n < 32; i++)
    if (fuse || pass_default_pipeline[i] != PASS_FUSE_ATTENTION) list[n++] = pass_default_pipeline[i];
  pass_options o = {.diag = diag, .verify_each = true};
  return pass_run_pipeline(g, list, n, &o);
}

static int count_op(const ir_graph *g, ir_op op) {
  int c = 0;
  for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i]->dead && g->nodes[i]->op == op;
  return c;
}

/* Values whose last two dims are [T, T] with T >= 2 (scores-shaped). */
static int count_square(const ir_graph *g, int64_t t) {
  int c = 0;
  for (int i = 0; i < g->n_values; i++) {
    const ir_type *ty = &g->values[i]->type;
    c += ty->rank >= 2 && ty->dims[ty->rank - 1] == t && ty->dims[ty->rank - 2] == t;
  }
  return c;
}

/* ---- running ---- */
typedef struct {
  rt_tensor **in, **params, **out;
  int n_in, n_params, n_out;
  rt_stats st;
} run_result;

static void free_run(run_result *r) {
  for (int i = 0; i < r->n_in; i++) rt_tensor_free(r->in[i]);
  for (int i = 0; i < r->n_params; i++) rt_tensor_free(r->params[i]);
  for (int i = 0; i < r->n_out; i++) rt_tensor_free(r->out[i]);
  free(r->in);
  free(r->params);
  free(r->out);
  memset(r, 0, sizeof *r);
}

/* Runs g on seeded inputs (integers below int_high) and N(0, pscale)
 * parameters, both made from the value names so two graphs with the same
 * inputs and parameters get the same numbers. */
static int run_graph(const ir_graph *g, int64_t int_high, double pscale, run_result *r) {
  memset(r, 0, sizeof *r);
  r->n_in = g->n_inputs, r->n_params = g->n_params, r->n_out = g->n_outputs;
  r->in = calloc((size_t)r->n_in + 1, sizeof *r->in);
  r->params = calloc((size_t)r->n_params + 1, sizeof *r->params);
  r->out = calloc((size_t)r->n_out + 1, sizeof *r->out);
  for (int i = 0; i < g->n_inputs; i++) {
    r->in[i] = rt_tensor_new(&g->inputs[i]->type);
    rt_fill_random(r->in[i], 7, g->inputs[i]->name, int_high);
  }
  for (int i = 0; i < g->n_params; i++) {
    rt_tensor *t = r->params[i] = rt_tensor_new(&g->params[i]->type);
    rt_fill_random(t, 11, g->params[i]->name, 0);
    int64_t n = ir_type_numel(&t->type);
    for (int64_t j = 0; j < n; j++) rt_tensor_set(t, j, rt_tensor_get(t, j) * pscale);
  }
  char err[512];
  int rc = rt_run(&rt_cpu_backend, g, r->in, r->params, r->out, &r->st, err, sizeof err);
  if (rc != 0) fprintf(stderr, "run failed: %s\n", err);
  return rc;
}

/* max |a - b| / max |b| over one output (0 when b is all zeros and a == b). */
static double rel_error(const rt_tensor *a, const rt_tensor *b) {
  int64_t n = ir_type_numel(&b->type);
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = rt_tensor_get(a, i), y = rt_tensor_get(b, i);
    double dd = fabs(x - y);
    if (!(dd <= diff)) diff = dd; /* NaN counts */
    if (fabs(y) > mag) mag = fabs(y);
  }
  return mag > 0 ? diff / mag : diff;
}

/* Builds the graph twice (fused / unfused) with make(), adds gradients,
 * runs both and compares every output. Returns the worst relative error. */
typedef ir_graph *(*make_fn)(bool f64);
static double compare_fused(const char *what, make_fn make, bool f64, int want_attn, int64_t int_high, double tol) {
  ir_graph *gf = make(f64), *gu = make(f64);
  CHECK(gf && gu);
  if (!gf || !gu) {
    ir_graph_free(gf);
    ir_graph_free(gu);
    return INFINITY;
  }
  add_grad(gf);
  add_grad(gu);
  CHECK_EQ_INT(run_passes(gf, true), 0);
  CHECK_EQ_INT(run_passes(gu, false), 0);
  CHECK_EQ_INT(count_op(gf, IR_OP_ATTENTION), want_attn);
  CHECK_EQ_INT(count_op(gf, IR_OP_ATTENTION_GRAD), want_attn);
  CHECK_EQ_INT(count_op(gf, IR_OP_SOFTMAX), 0);
  CHECK_EQ_INT(count_op(gu, IR_OP_ATTENTION), 0);
  CHECK_EQ_INT(gf->n_outputs, gu->n_outputs);
  run_result rf, ru;
  double worst = 0;
  const char *worst_name = "";
  if (run_graph(gf, int_high, 0.3, &rf) == 0 && run_graph(gu, int_high, 0.3, &ru) == 0) {
    for (int i = 0; i < gf->n_outputs && i < gu->n_outputs; i++) {
      CHECK_STR(gf->outputs[i].name, gu->outputs[i].name);
      double e = rel_error(rf.out[i], ru.out[i]);
      if (e > tol) fprintf(stderr, "  %s %s: output %s differs: rel %.3g\n", what, f64 ? "f64" : "f32", gf->outputs[i].name, e);
      CHECK(e <= tol);
      if (!(e <= worst)) worst = e, worst_name = gf->outputs[i].name;
    }
    printf("%-28s %s: %d attention, %d outputs, max rel error fused vs unfused %.2e (%s), peak %zu vs %zu bytes\n",
           what, f64 ? "f64" : "f32", want_attn, gf->n_outputs, worst, worst_name, rf.st.peak_bytes, ru.st.peak_bytes);
    CHECK_EQ_INT(rf.st.peak_bytes, pass_predict_peak_bytes(gf));
  } else {
    CHECK(0);
  }
  free_run(&rf);
  free_run(&ru);
  ir_graph_free(gf);
  ir_graph_free(gu);
  return worst;
}

/* ---- the models ---- */
static ir_graph *make_gpt(bool f64) { return load_tg("examples/gpt.tg", "tiny", NULL, 0, f64); }
static ir_graph *make_reverse(bool f64) { return load_tg("examples/reverse.tg", "tiny", NULL, 0, f64); }
/* grouped-query attention: 2 kv heads for 4 query heads (llama.tg's repeat_kv) */
static ir_graph *make_llama_gqa(bool f64) {
  static const fe_define d[] = {{"nKV", "2"}};
  return load_tg("examples/llama.tg", "tiny", d, 1, f64);
}
static ir_graph *make_block(bool f64) {
  static const fe_define d[] = {{"L", "12"}};
  return load_tg("examples/transformer_block.tg", NULL, d, 1, f64);
}

/* Not causal, T = 5 != S = 7, batch dims [2, 3], k given transposed through
 * an einsum, scale by division; loss = sum(o * w). */
static const char *const noncausal_ir =
    "tgc.ir 1\n"
    "graph @noncausal\n"
    "  input %w : f32[2, 3, 5, 6] loc 1:1\n"
    "  param %q : f32[2, 3, 5, 4] init normal(1.0) loc 2:1\n"
    "  param %k : f32[2, 3, 7, 4] init normal(1.0) loc 3:1\n"
    "  param %v : f32[2, 3, 7, 6] init normal(1.0) loc 4:1\n"
    "  %s = einsum %q, %k {eq = \"bhtd,bhsd->bhts\"} : f32[2, 3, 5, 7] loc 5:1\n"
    "  %c = const {value = 0.6} : f32[] loc 6:1\n"
    "  %x = div %s, %c : f32[2, 3, 5, 7] loc 7:1\n"
    "  %p = softmax %x {axis = 3} : f32[2, 3, 5, 7] loc 8:1\n"
    "  %o = matmul %p, %v : f32[2, 3, 5, 6] loc 9:1\n"
    "  %ow = mul %o, %w : f32[2, 3, 5, 6] loc 10:1\n"
    "  %loss = reduce_sum %ow {axes = [0, 1, 2, 3], keepdims = 0} : f32[] loc 11:1\n"
    "  output \"loss\" = %loss\n"
    "  output \"o\" = %o\n"
    "end\n";
static ir_graph *make_noncausal(bool f64) { return load_ir(noncausal_ir, f64); }

/* Not causal, T = 40, S = 150 (three key blocks: the online softmax rescales). */
static const char *const long_ir =
    "tgc.ir 1\n"
    "graph @long\n"
    "  input %w : f32[2, 40, 3] loc 12:1\n"
    "  param %q : f32[2, 40, 5] init normal(1.0) loc 13:1\n"
    "  param %k : f32[2, 150, 5] init normal(1.0) loc 14:1\n"
    "  param %v : f32[2, 150, 3] init normal(1.0) loc 15:1\n"
    "  %kt = transpose %k {perm = [0, 2, 1]} : f32[2, 5, 150] loc 16:1\n"
    "  %s = matmul %q, %kt : f32[2, 40, 150] loc 17:1\n"
    "  %c = const {value = 2.5} : f32[] loc 18:1\n"
    "  %x = mul %c, %s : f32[2, 40, 150] loc 19:1\n"
    "  %p = softmax %x {axis = 2} : f32[2, 40, 150] loc 20:1\n"
    "  %o = matmul %p, %v : f32[2, 40, 3] loc 21:1\n"
    "  %ow = mul %o, %w : f32[2, 40, 3] loc 22:1\n"
    "  %loss = reduce_sum %ow {axes = [0, 1, 2], keepdims = 0} : f32[] loc 23:1\n"
    "  output \"loss\" = %loss\n"
    "end\n";
static ir_graph *make_long(bool f64) { return load_ir(long_ir, f64); }

/* Causal with T = 70 < S = 100 (the diagonal shifted by 30), mask before the
 * scale (a positive constant), k^T an input of its own (the pass transposes it). */
static const char *const causal_ir =
    "tgc.ir 1\n"
    "graph @causal\n"
    "  input %w : f32[3, 70, 4] loc 24:1\n"
    "  param %q : f32[3, 70, 6] init normal(1.0) loc 25:1\n"
    "  param %kt : f32[3, 6, 100] init normal(1.0) loc 26:1\n"
    "  param %v : f32[3, 100, 4] init normal(1.0) loc 27:1\n"
    "  %s = matmul %q, %kt : f32[3, 70, 100] loc 28:1\n"
    "  %m = causal_mask %s : f32[3, 70, 100] loc 29:1\n"
    "  %c = const {value = 0.4} : f32[] loc 30:1\n"
    "  %x = mul %m, %c : f32[3, 70, 100] loc 31:1\n"
    "  %p = softmax %x {axis = 2} : f32[3, 70, 100] loc 32:1\n"
    "  %o = matmul %p, %v : f32[3, 70, 4] loc 33:1\n"
    "  %ow = mul %o, %w : f32[3, 70, 4] loc 34:1\n"
    "  %loss = reduce_sum %ow {axes = [0, 1, 2], keepdims = 0} : f32[] loc 35:1\n"
    "  output \"loss\" = %loss\n"
    "end\n";
static ir_graph *make_causal(bool f64) { return load_ir(causal_ir, f64); }

static void test_pattern(void) {
  ir_graph *g = make_gpt(false);
  CHECK(g != NULL);
  if (!g) return;
  pass_options o = {.diag = diag, .verify_each = true};
  pass_id p = PASS_FUSE_ATTENTION;
  CHECK_EQ_INT(pass_run_pipeline(g, &p, 1, &o), 0);
  CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION), 2);
  CHECK_EQ_INT(count_op(g, IR_OP_SOFTMAX), 0);
  CHECK_EQ_INT(count_op(g, IR_OP_CAUSAL_MASK), 0);
  CHECK_EQ_INT(count_square(g, 16), 0);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op != IR_OP_ATTENTION) continue;
    CHECK_EQ_INT(ir_node_attr_int(n, "causal", -1), 1);
    CHECK(ir_node_attr_float(n, "scale", 0) == (double)(float)(1 / sqrt(8.0))); /* the f32 constant */
    CHECK(n->layer == 0 || n->layer == 1);
    CHECK_STR(ir_type_str(&n->out[1]->type, (char[64]){0}, 64), "f32[4, 4, 16]");
  }
  /* idempotent: nothing left to fuse */
  int nodes = g->n_nodes;
  CHECK_EQ_INT(pass_run_pipeline(g, &p, 1, &o), 0);
  CHECK_EQ_INT(g->n_nodes, nodes);
  ir_graph_free(g);

  g = make_reverse(false);
  if (g) {
    CHECK_EQ_INT(pass_run_pipeline(g, &p, 1, &o), 0);
    CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION), 2);
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->op == IR_OP_ATTENTION) {
        CHECK_EQ_INT(ir_node_attr_int(g->nodes[i], "causal", -1), 0);
        CHECK_NEAR(ir_node_attr_float(g->nodes[i], "scale", 0), 1 / sqrt(8.0), 1e-7);
      }
    ir_graph_free(g);
  }
  g = make_block(false);
  if (g) { /* scale 1/sqrt(D), not 1/sqrt(head dim): any constant is the op's scale */
    CHECK_EQ_INT(pass_run_pipeline(g, &p, 1, &o), 0);
    CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION), 1);
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->op == IR_OP_ATTENTION) CHECK_NEAR(ir_node_attr_float(g->nodes[i], "scale", 0), 0.125, 1e-7);
    ir_graph_free(g);
  }
  /* the training graph: the fused backward, and no T x T value anywhere */
  g = make_gpt(false);
  ir_graph *u = make_gpt(false);
  if (g && u) {
    add_grad(g);
    add_grad(u);
    CHECK_EQ_INT(run_passes(g, true), 0);
    CHECK_EQ_INT(run_passes(u, false), 0);
    CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION_GRAD), 2);
    CHECK_EQ_INT(count_square(g, 16), 0);
    CHECK(count_square(u, 16) > 0);
    printf("gpt tiny training graph: %d nodes fused, %d unfused; %d score-shaped values unfused, 0 fused\n",
           g->n_nodes, u->n_nodes, count_square(u, 16));
  }
  ir_graph_free(g);
  ir_graph_free(u);
}

static void test_equivalence(void) {
  static const struct {
    const char *what;
    make_fn make;
    int attn;
    int64_t int_high;
  } models[] = {
      {"gpt tiny", make_gpt, 2, 64},
      {"reverse tiny", make_reverse, 2, 16},
      {"transformer_block L=12", make_block, 1, 0},
      {"non-causal T=5 S=7 einsum", make_noncausal, 1, 0},
      {"non-causal T=40 S=150", make_long, 1, 0},
      {"causal T=70 S=100", make_causal, 1, 0},
      {"llama tiny nKV=2 (GQA)", make_llama_gqa, 2, 64},
  };
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    compare_fused(models[i].what, models[i].make, false, models[i].attn, models[i].int_high, 1e-5);
    compare_fused(models[i].what, models[i].make, true, models[i].attn, models[i].int_high, 1e-12);
  }
}

/* The tangent of the loss along random parameter directions, through pass_jvp. */
static double jvp_of(bool fuse, make_fn make, int64_t int_high) {
  ir_graph *g = make(true);
  if (!g) return NAN;
  if (fuse) {
    pass_options o = {.diag = diag};
    pass_id p = PASS_FUSE_ATTENTION;
    CHECK_EQ_INT(pass_run_pipeline(g, &p, 1, &o), 0);
  }
  int n = g->n_params;
  ir_value **tan = malloc((size_t)n * sizeof *tan), **wrt = malloc((size_t)n * sizeof *wrt);
  for (int i = 0; i < n; i++) {
    char name[256];
    snprintf(name, sizeof name, "tan_%s", g->params[i]->name);
    wrt[i] = g->params[i];
    tan[i] = ir_graph_add_input(g, name, g->params[i]->type, (ir_loc){0});
  }
  ir_value *loss = g->outputs[0].value, *out = NULL;
  double r = NAN;
  if (pass_jvp(g, wrt, tan, n, &loss, 1, &out, diag) == 0) {
    ir_graph_add_output(g, "t_loss", out);
    CHECK_EQ_INT(ir_verify(g, diag), 0);
    run_result rr;
    if (run_graph(g, int_high, 0.3, &rr) == 0) r = rt_tensor_get(rr.out[g->n_outputs - 1], 0);
    free_run(&rr);
  }
  free(tan);
  free(wrt);
  ir_graph_free(g);
  return r;
}

static void test_jvp(void) {
  double f = jvp_of(true, make_gpt, 64), u = jvp_of(false, make_gpt, 64);
  printf("jvp of the gpt tiny loss (f64): fused %.17g, unfused %.17g\n", f, u);
  CHECK_NEAR(f, u, 1e-12);
  f = jvp_of(true, make_causal, 0), u = jvp_of(false, make_causal, 0);
  CHECK_NEAR(f, u, 1e-12);
  f = jvp_of(true, make_noncausal, 0), u = jvp_of(false, make_noncausal, 0);
  CHECK_NEAR(f, u, 1e-12);
  f = jvp_of(true, make_llama_gqa, 64), u = jvp_of(false, make_llama_gqa, 64);
  printf("jvp of the llama tiny nKV=2 loss (f64): fused %.17g, unfused %.17g\n", f, u);
  CHECK_NEAR(f, u, 1e-12);
}

/* Grouped-query: the fused attention reads the 2 kv heads themselves (no
 * broadcast, no multiply by ones left in the forward), [B, 2, T, Hd]. */
static void test_gqa_pattern(void) {
  ir_graph *g = make_llama_gqa(false);
  if (!g) return;
  pass_options o = {.diag = diag};
  pass_id p[2] = {PASS_FUSE_ATTENTION, PASS_CANONICALIZE};
  CHECK_EQ_INT(pass_run_pipeline(g, p, 2, &o), 0);
  CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION), 2);
  CHECK_EQ_INT(count_op(g, IR_OP_BROADCAST), 0);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_ATTENTION) continue;
    CHECK_EQ_INT((int)n->in[0]->type.dims[1], 4);
    CHECK_EQ_INT((int)n->in[1]->type.dims[1], 2);
    CHECK_EQ_INT((int)n->in[2]->type.dims[1], 2);
    /* the cost model reads the smaller k and v: q, k, v, o and lse once */
    double bytes = 0;
    for (int j = 0; j < 3; j++) bytes += 4.0 * (double)ir_type_numel(&n->in[j]->type);
    for (int j = 0; j < 2; j++) bytes += 4.0 * (double)ir_type_numel(&n->out[j]->type);
    CHECK_NEAR(pass_node_cost(n).bytes, bytes, 0.5);
    CHECK(4.0 * (double)ir_type_numel(&n->in[1]->type) * 2 == 4.0 * (double)ir_type_numel(&n->in[0]->type));
  }
  ir_graph_free(g);
  /* the training graph: attention_grad reads the same kv heads and gives
   * dk, dv of their shape (no broadcast of k or v anywhere, no reduce_sum
   * over a group); the cost model counts its FLOPs per query head (what
   * the broadcast copy's attention_grad counted) and reads / writes the
   * kv-shaped tensors: operands once, results twice (zero-filled first) */
  g = make_llama_gqa(false);
  if (!g) return;
  add_grad(g);
  CHECK_EQ_INT(run_passes(g, true), 0);
  CHECK_EQ_INT(count_op(g, IR_OP_ATTENTION_GRAD), 2);
  CHECK_EQ_INT(count_op(g, IR_OP_BROADCAST), 0);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_out; j++) CHECK(!(n->out[j]->type.rank == 5 && n->out[j]->type.dims[2] == 2)); /* [B, 2, 2, T, Hd] */
    if (n->op != IR_OP_ATTENTION_GRAD) continue;
    CHECK_EQ_INT((int)n->in[1]->type.dims[1], 2);
    CHECK_EQ_INT((int)n->out[1]->type.dims[1], 2);
    CHECK_EQ_INT((int)n->out[2]->type.dims[1], 2);
    double bytes = 0;
    for (int j = 0; j < 6; j++) bytes += 4.0 * (double)ir_type_numel(&n->in[j]->type);
    for (int j = 0; j < 3; j++) bytes += 2 * 4.0 * (double)ir_type_numel(&n->out[j]->type);
    CHECK_NEAR(pass_node_cost(n).bytes, bytes, 0.5);
    double b = 4 * 4, t = 16, s = 16, e = 8, f = 8; /* B x Hq query heads */
    CHECK_NEAR(pass_node_cost(n).flops, b * (6 * t * s * e + 4 * t * s * f + 6 * t * s + 2 * t * f), 0.5); /* causal */
  }
  ir_graph_free(g);
}

/* The fused training graph gives the same bits on 1 and 2 threads (llama
 * with grouped-query: each kv head's dk, dv summed over its query heads in
 * one fixed order). */
static void determinism_of(make_fn make, int64_t int_high) {
  ir_graph *g = make(false);
  if (!g) return;
  add_grad(g);
  CHECK_EQ_INT(run_passes(g, true), 0);
  int saved = omp_get_max_threads();
  run_result a, b;
  omp_set_num_threads(1);
  int ra = run_graph(g, int_high, 0.3, &a);
  omp_set_num_threads(2);
  int rb = run_graph(g, int_high, 0.3, &b);
  omp_set_num_threads(saved);
  CHECK(ra == 0 && rb == 0);
  if (ra == 0 && rb == 0)
    for (int i = 0; i < g->n_outputs; i++) CHECK(memcmp(a.out[i]->data, b.out[i]->data, a.out[i]->nbytes) == 0);
  free_run(&a);
  free_run(&b);
  ir_graph_free(g);
}

static void test_determinism(void) {
  determinism_of(make_long, 0);
  determinism_of(make_llama_gqa, 64);
}

/* gpt tiny at T = 2048, forward only. */
static void test_peak_memory(void) {
  static const fe_define d[] = {{"ctx", "2048"}};
  ir_graph *gf = load_tg("examples/gpt.tg", "tiny", d, 1, false), *gu = load_tg("examples/gpt.tg", "tiny", d, 1, false);
  CHECK(gf && gu);
  if (!gf || !gu) {
    ir_graph_free(gf);
    ir_graph_free(gu);
    return;
  }
  CHECK_EQ_INT(run_passes(gf, true), 0);
  CHECK_EQ_INT(run_passes(gu, false), 0);
  const double B = 4, nH = 4, T = 2048;
  double score = B * nH * T * T * 4; /* one f32 [B, nH, T, T] tensor */
  double pf = (double)pass_predict_peak_bytes(gf), pu = (double)pass_predict_peak_bytes(gu);
  printf("gpt tiny T=2048 forward: predicted peak %.0f bytes fused, %.0f unfused; difference %.0f = %.3f score "
         "tensors of %.0f bytes\n",
         pf, pu, pu - pf, (pu - pf) / score, score);
  CHECK(pu >= 2 * score);
  CHECK(pu - pf >= 1.95 * score && pu - pf <= 2 * score);
  CHECK(pf < score / 16);
  /* run the fused forward once and check the measured peak (about 1 s; not
   * under AddressSanitizer, where it takes ten) */
#if defined(__SANITIZE_ADDRESS__)
  printf("gpt tiny T=2048 fused forward: not run under AddressSanitizer\n");
  ir_graph_free(gf);
  ir_graph_free(gu);
  return;
#endif
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  run_result r;
  int rc = run_graph(gf, 64, 0.02, &r);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("gpt tiny T=2048 fused forward: %.3f s, measured peak %zu bytes, loss %.6f\n", s, r.st.peak_bytes,
           rt_tensor_get(r.out[0], 0));
    CHECK_EQ_INT(r.st.peak_bytes, (int64_t)pf);
    CHECK(isfinite(rt_tensor_get(r.out[0], 0)));
  }
  free_run(&r);
  ir_graph_free(gf);
  ir_graph_free(gu);
}

int main(void) {
  diag = ir_diag_new(stderr);
  test_pattern();
  test_equivalence();
  test_jvp();
  test_gqa_pattern();
  test_determinism();
  test_peak_memory();
  ir_diag_free(diag);
  return check_done();
}
